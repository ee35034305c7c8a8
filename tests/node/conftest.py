"""The real-node fixtures (k8stest.node.fixtures) for this folder, and an admin client."""

from collections.abc import Iterator

import pytest

from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient
from k8stest.node.fixtures import node_binaries, node_control_plane, node_images, node_sim_root, real_node
from k8stest.node.plugins import node_image

__all__ = [
    "client",
    "node_binaries",
    "node_control_plane",
    "node_image",
    "node_images",
    "node_sim_root",
    "real_node",
]


@pytest.fixture
def client(node_control_plane: ControlPlane) -> Iterator[KubeClient]:
    """An admin client for one test."""
    c = node_control_plane.client()
    try:
        yield c
    finally:
        c.close()
