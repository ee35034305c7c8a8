"""pytest fixtures for the real-node tier: one kubelet node, shared by a test module's session.

Import them into a folder's ``conftest.py`` (``from k8stest.node.fixtures import *``); they build on
``k8s_binaries`` from :mod:`k8stest.pytest_plugin`. The node gets a control plane of its own
(:func:`k8stest.node.start_node_control_plane`): the API server reaches webhooks and the kubelet
only through the node.

Policy as for the control plane: with ``CI=true`` anything missing (root, the node binaries,
``unshare``) fails the test; elsewhere the test skips and says how to get it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.binaries import Binaries
from k8stest.controlplane import ControlPlane
from k8stest.node import (
    NodeBinaries,
    NodeConfig,
    RealNode,
    find_node_binaries,
    node_unavailable_reason,
    start_node_control_plane,
    start_real_node,
    write_test_images,
)
from k8stest.node.plugins import node_image_archive
from k8stest.pytest_plugin import _unavailable

__all__ = [
    "NODE_PROFILE",
    "node_binaries",
    "node_control_plane",
    "node_images",
    "node_sim_root",
    "own_image_node",
    "real_node",
]

# The simulated hardware of the session node: two i915 GPUs (one with a MEI node) and one xe; two
# QAT 4xxx PFs (crypto, compression) with two VFs each on vfio-pci, as DPDK mode serves them; SGX
# with 256 MiB of EPC; one DSA with a dedicated and a shared user work queue; one Arria 10 FPGA on
# the DFL driver with one port running native loopback 0.
NODE_PROFILE = """
[node]
name = "k8stest-node"
[[gpu]]
driver = "i915"
count = 2
mei = true
[[gpu]]
driver = "xe"
count = 1
[[qat]]
generation = "4xxx"
vfs = 2
services = "sym;asym"
[[qat]]
generation = "4xxx"
vfs = 2
services = "dc"
[[sgx]]
epc_bytes_per_node = 268435456
[[dsa]]
wqs = 2
wq_mode = "mixed"
[[fpga]]
driver = "dfl"
count = 1
"""


@pytest.fixture(scope="session")
def node_binaries() -> NodeBinaries:
    """kubelet, containerd, runc, CNI plugins (test/node/build.sh); root and unshare checked too."""
    reason = node_unavailable_reason()
    if reason:
        _unavailable(reason)
    bins, reason = find_node_binaries()
    if bins is None:
        _unavailable(reason)
    assert bins is not None
    return bins


@pytest.fixture(scope="session")
def node_images(node_binaries: NodeBinaries, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OCI archive with the workload (busybox) and sandbox images."""
    return write_test_images(node_binaries, tmp_path_factory.mktemp("node-images") / "k8stest-busybox.tar")


@pytest.fixture(scope="session")
def node_sim_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("node-sim")
    build_node(parse_node_spec(NODE_PROFILE, "NODE_PROFILE"), root)
    return root


@pytest.fixture(scope="session")
def node_control_plane(
    k8s_binaries: Binaries, node_binaries: NodeBinaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """The real node's control plane (no kwok; the API server's cluster traffic goes through the node)."""
    cp = start_node_control_plane(k8s_binaries, tmp_path_factory.mktemp("node-cp"))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def real_node(
    node_binaries: NodeBinaries,
    node_control_plane: ControlPlane,
    node_images: Path,
    node_sim_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    """A Ready kubelet node named ``k8stest-node`` with :data:`NODE_PROFILE`'s devices."""
    node = start_real_node(
        node_binaries,
        node_control_plane,
        tmp_path_factory.mktemp("real-node"),
        NodeConfig(name="k8stest-node"),
        sim_root=node_sim_root,
        images=[node_images],
    )
    try:
        yield node
    finally:
        node.stop()


@contextmanager
def own_image_node(
    node_binaries: NodeBinaries,
    cp: ControlPlane,
    node_images: Path,
    workdir: Path,
    name: str,
    profile: str,
    profile_name: str,
) -> Iterator[RealNode]:
    """A node of its own with ``profile``'s simulated devices and the project's node image (from
    ``make images``) imported, for modules that install the project's DaemonSets on it. The kubelet
    syncs every 10 s, so a failed prepare is tried again soon. Stopped and its Node deleted after."""
    archive = node_image_archive()
    if archive is None:
        _unavailable("no node image archive (node-*.oci.tar): run `make images`")
    assert archive is not None
    build_node(parse_node_spec(profile, profile_name), workdir / "sim")
    node = start_real_node(
        node_binaries,
        cp,
        workdir / "node",
        NodeConfig(name=name, sync_frequency="10s"),
        sim_root=workdir / "sim",
        images=[node_images, archive],
    )
    try:
        yield node
    finally:
        if node.process.alive():
            node.stop()
        client = cp.client()
        try:
            client.delete_if_present(f"/api/v1/nodes/{name}")
        finally:
            client.close()
