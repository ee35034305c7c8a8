"""The bundled node profiles for SGX, DSA, IAA and NPU build and are discovered as described."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.plugins.idxd.discovery import DSA, IAA, scan_work_queues
from intel_device_plugins.plugins.idxd.vfio import scan_vfio
from intel_device_plugins.plugins.npu.discovery import scan_npus
from intel_device_plugins.plugins.sgx.discovery import SgxLimits, scan_sgx
from intel_device_plugins.plugins.sgx.epchook import epc_size
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text


def build(name: str, root: Path) -> str:
    build_node(parse_node_spec(profile_text(name), name), root)
    return str(root)


def test_xeon_accelerators(tmp_path: Path) -> None:
    prefix = build("xeon-accelerators", tmp_path)
    dsa = scan_work_queues(prefix, DSA, shared_dev_num=2)
    assert {kind: len(devices) for kind, devices in dsa.tree.items()} == {
        "wq-user-dedicated": 6,
        "wq-user-shared": 12,
        "wq-kernel-dedicated": 2,
    }
    assert dsa.problems == ()
    iaa = scan_work_queues(prefix, IAA, shared_dev_num=1)
    assert {kind: len(devices) for kind, devices in iaa.tree.items()} == {"wq-user-shared": 8}
    numa = {info.numa_nodes for info in iaa.tree["wq-user-shared"].values()}
    assert numa == {(0,), (1,)}
    assert len(scan_sgx(prefix, SgxLimits(enclave=10, provision=10)).tree["enclave"]) == 10
    assert epc_size(prefix)[0] == 128 * 1024**3


def test_dsa_large(tmp_path: Path) -> None:
    prefix = build("dsa-large", tmp_path)
    tree = scan_work_queues(prefix, DSA, shared_dev_num=4).tree
    assert len(tree["wq-user-dedicated"]) == 32
    assert len(tree["wq-user-shared"]) == 32 * 4


def test_dsa_vfio(tmp_path: Path) -> None:
    assert len(scan_vfio(build("dsa-vfio", tmp_path)).tree["vfio"]) == 4


def test_npu_client(tmp_path: Path) -> None:
    assert list(scan_npus(build("npu-client", tmp_path), 1).tree["accel"]) == ["accel0-0"]
