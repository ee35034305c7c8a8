"""Every plugin binary against the kubelet's real device manager.

Each case starts the real plugin process on a small simulated node, waits until the device manager
reports the expected capacity, admits a pod and checks the run options the kubelet would hand to
the container runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from k8stest.devicemanager import DeviceManagerHarness, pod_manifest
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s


@dataclass(frozen=True)
class Case:
    script: str
    node: str
    flags: tuple[str, ...]
    capacity: dict[str, int]
    request: tuple[str, int]
    env_keys: tuple[str, ...] = ()


CASES = {
    "qat": Case(
        "intel_qat_device_plugin",
        '[[qat]]\ngeneration = "4xxx"\ncount = 1\nvfs = 4\nservices = "sym;asym"\n',
        (),
        {"qat.intel.com/cy": 4},
        ("qat.intel.com/cy", 2),
        ("QAT0", "QAT1"),
    ),
    "dlb": Case(
        "intel_dlb_device_plugin",
        '[[dlb]]\ngeneration = "dlb2"\ncount = 2\n',
        (),
        {"dlb.intel.com/pf": 2},
        ("dlb.intel.com/pf", 1),
    ),
    "dsa": Case(
        "intel_dsa_device_plugin",
        '[[dsa]]\ncount = 1\nwqs = 2\nwq_mode = "mixed"\n',
        ("-shared-dev-num", "3"),
        {"dsa.intel.com/wq-user-dedicated": 1, "dsa.intel.com/wq-user-shared": 3},
        ("dsa.intel.com/wq-user-shared", 2),
    ),
    "iaa": Case(
        "intel_iaa_device_plugin",
        '[[iaa]]\ncount = 2\nwqs = 1\nwq_mode = "shared"\n',
        (),
        {"iaa.intel.com/wq-user-shared": 2},
        ("iaa.intel.com/wq-user-shared", 1),
    ),
    "npu": Case(
        "intel_npu_device_plugin",
        "[[npu]]\ncount = 1\n",
        ("-shared-dev-num", "2"),
        {"npu.intel.com/accel": 2},
        ("npu.intel.com/accel", 2),
    ),
    "sgx": Case(
        "intel_sgx_device_plugin",
        "[[sgx]]\nepc_bytes_per_node = 1073741824\n",
        ("-enclave-limit", "3", "-provision-limit", "2"),
        {"sgx.intel.com/enclave": 3, "sgx.intel.com/provision": 2},
        ("sgx.intel.com/enclave", 1),
    ),
}


def start(script: str, root: Path, harness: DeviceManagerHarness, flags: Sequence[str]) -> ManagedProcess:
    argv = [
        console_script(script),
        "-prefix", str(root),
        "-device-plugin-dir", str(harness.device_plugin_dir),
        "-cdi-dir", str(harness.workdir / "cdi"),
        *flags,
    ]  # fmt: skip
    return ManagedProcess(script, argv, harness.workdir / f"{script}.log")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_plugin_registers_and_allocates_with_the_real_device_manager(
    kind: str, device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    case = CASES[kind]
    root = tmp_path / "node"
    build_node(parse_node_spec("[node]\nnuma_nodes = 2\n" + case.node), root)
    process = start(case.script, root, device_manager, case.flags)
    try:
        for resource, capacity in case.capacity.items():
            found = device_manager.wait_resource(resource, capacity=capacity, allocatable=capacity)
            assert all(device.health == "Healthy" for device in found.devices)
        resource, count = case.request
        options = device_manager.admit(pod_manifest({resource: count}))["ctr"]
        assert options.devices, f"{resource}: no device nodes"
        for device in options.devices:
            assert device.host_path.startswith(str(root)) and Path(device.host_path).exists()
            assert device.permissions == "rw"
        assert tuple(sorted(options.envs)) == case.env_keys
        assert device_manager.resources()[resource].allocatable >= 0
    finally:
        process.stop()


def test_qat_containers_of_one_pod_each_get_their_own_env_numbering(
    device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    case = CASES["qat"]
    root = tmp_path / "node"
    build_node(parse_node_spec("[node]\n" + case.node), root)
    process = start(case.script, root, device_manager, case.flags)
    try:
        device_manager.wait_resource("qat.intel.com/cy", capacity=4, allocatable=4)
        pod = pod_manifest({"first": {"qat.intel.com/cy": 2}, "second": {"qat.intel.com/cy": 1}})
        options = device_manager.admit(pod)
        assert sorted(options["first"].envs) == ["QAT0", "QAT1"]
        assert sorted(options["second"].envs) == ["QAT0"]
        assert options["second"].envs["QAT0"] not in options["first"].envs.values()
    finally:
        process.stop()


def test_combined_process_registers_every_kind_with_the_real_device_manager(
    device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    root = tmp_path / "node"
    node = "[node]\nnuma_nodes = 2\n" + "".join(CASES[kind].node for kind in ("qat", "dlb", "npu", "sgx"))
    build_node(parse_node_spec(node), root)
    flags = [
        "--plugin", "qat", "--plugin", "dlb", "--plugin", "npu -shared-dev-num 2",
        "--plugin", "sgx -enclave-limit 3 -provision-limit 2",
    ]  # fmt: skip
    process = start("intel_device_plugins", root, device_manager, flags)
    try:
        for kind in ("qat", "dlb", "npu", "sgx"):
            for resource, capacity in CASES[kind].capacity.items():
                device_manager.wait_resource(resource, capacity=capacity, allocatable=capacity)
        options = device_manager.admit(pod_manifest({"qat.intel.com/cy": 1, "npu.intel.com/accel": 1}))["ctr"]
        assert "QAT0" in options.envs
        assert any(d.host_path.endswith("/dev/accel/accel0") for d in options.devices)
    finally:
        process.stop()
