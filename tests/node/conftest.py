"""The real-node fixtures (k8stest.node_fixtures) for this folder."""

from k8stest.node_fixtures import node_binaries, node_images, node_sim_root, real_node

__all__ = ["node_binaries", "node_images", "node_sim_root", "real_node"]
