"""The real ``intel_fpga_device_plugin`` process against the kubelet's real device manager.

Every mode on both kernel drivers: registration, health, NUMA, and the run options the kubelet
hands to the runtime (device nodes, the region mode's CDI device and annotation). The node
annotation that overrides ``-mode`` is read from the real API server with a ServiceAccount, once
with the permission to get nodes and once without it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga.discovery import af_resource_name
from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.process import console_script
from k8stest.devicemanager import DeviceManagerHarness, pod_manifest
from k8stest.kubeclient import KubeClient
from k8stest.process import ManagedProcess

pytestmark = pytest.mark.k8s

NLB0 = "fpga.intel.com/" + af_resource_name(fpga.ARRIA10_INTERFACE, fpga.NLB0_AFU)
REGION = f"fpga.intel.com/region-{fpga.ARRIA10_INTERFACE}"


@pytest.fixture
def device_plugin_dir() -> Iterator[Path]:
    """A short plugin directory: the AF sockets' names are 74 characters, and a Unix socket path
    may have at most 107 (with the kubelet's ``/var/lib/kubelet/device-plugins/`` it is 106)."""
    directory = Path(tempfile.mkdtemp(prefix="fpgadp", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def start_plugin(root: Path, harness: DeviceManagerHarness, *flags: str) -> ManagedProcess:
    argv = [
        console_script("intel_fpga_device_plugin"),
        "-prefix", str(root),
        "-device-plugin-dir", str(harness.device_plugin_dir),
        "-cdi-dir", str(harness.workdir / "cdi"),
        "-node-name", "",
        *flags,
    ]  # fmt: skip
    return ManagedProcess("intel_fpga_device_plugin", argv, harness.workdir / "fpga-plugin.log")


def two_cards(root: Path, driver: str) -> tuple[FakeTree, fpga.SimulatedFpga, fpga.SimulatedFpga]:
    """Card 0 on NUMA node 0 with two ports; card 1 on node 1 with its port on a VF."""
    tree = FakeTree(root, numa_nodes=2)
    tree.write_numa_nodes()
    first = fpga.add_fpga(tree, driver=driver, ports=2, numa_node=0)
    second = fpga.add_fpga(tree, driver=driver, ports=0, vfs=1, numa_node=1)
    return tree, first, second


@pytest.mark.parametrize("driver", [fpga.DFL, fpga.OPAE])
def test_af_mode_serves_ports_and_follows_health_and_hotplug(
    driver: str, device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    tree, first, second = two_cards(tmp_path / "node", driver)
    process = start_plugin(tree.root, device_manager, "-mode", "af")
    try:
        found = device_manager.wait_resource(NLB0, capacity=3, allocatable=3)
        assert {d.id: d.numa for d in found.devices} == {
            first.ports[0].name: (0,),
            first.ports[1].name: (0,),
            second.ports[0].name: (1,),
        }
        options = device_manager.admit(pod_manifest({NLB0: 1}))["ctr"]
        (node,) = options.devices
        assert Path(node.host_path).name in {port.name for port in (*first.ports, *second.ports)}
        assert node.container_path == node.host_path and node.permissions == "rw"
        assert options.cdi_devices == () and options.annotations == {}

        fpga.remove_fpga(tree, first)
        left = device_manager.wait_resource(NLB0, capacity=1, allocatable=1, timeout=15)
        assert [d.id for d in left.devices] == [second.ports[0].name]

        fpga.set_afu_id(tree, second.ports[0].name, fpga.UNPROGRAMMED)
        broken = "fpga.intel.com/" + af_resource_name(fpga.ARRIA10_INTERFACE, fpga.UNPROGRAMMED)
        unhealthy = device_manager.wait_resource(broken, capacity=1, allocatable=0)
        assert [d.health for d in unhealthy.devices] == ["Unhealthy"]
    finally:
        process.stop()


@pytest.mark.parametrize("driver", [fpga.DFL, fpga.OPAE])
def test_region_mode_gives_ports_the_hook_and_the_annotation(
    driver: str, device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    tree, first, second = two_cards(tmp_path / "node", driver)
    process = start_plugin(tree.root, device_manager, "-mode", "region")
    try:
        found = device_manager.wait_resource(REGION, capacity=2, allocatable=2)
        assert {d.id: d.numa for d in found.devices} == {first.fme: (0,), second.fme: (1,)}
        options = device_manager.admit(pod_manifest({REGION: 2}))["ctr"]
        ports = {port.name for port in (*first.ports, *second.ports)}
        assert sorted(Path(d.host_path).name for d in options.devices) == sorted(ports)
        assert options.annotations == {"com.intel.fpga.mode": "fpga.intel.com/region"}
        assert sorted(options.cdi_devices) == sorted(
            f"intel.cdi.k8s.io/fpga={fme}" for fme in (first.fme, second.fme)
        )
        spec_file = device_manager.workdir / "cdi" / f"intel.cdi.k8s.io-fpga-{first.fme}.yaml"
        text = spec_file.read_text(encoding="utf-8")
        assert "createRuntime" in text and "/opt/intel/fpga-sw/intel-fpga-crihook" in text
    finally:
        process.stop()


@pytest.mark.parametrize("driver", [fpga.DFL, fpga.OPAE])
def test_regiondevel_mode_adds_the_fme_node(
    driver: str, device_manager: DeviceManagerHarness, tmp_path: Path
) -> None:
    tree, first, second = two_cards(tmp_path / "node", driver)
    process = start_plugin(tree.root, device_manager, "-mode", "regiondevel")
    try:
        device_manager.wait_resource(REGION, capacity=2, allocatable=2)
        options = device_manager.admit(pod_manifest({REGION: 2}))["ctr"]
        names = sorted(Path(d.host_path).name for d in options.devices)
        expected = [first.fme, second.fme, *(port.name for port in (*first.ports, *second.ports))]
        assert names == sorted(expected)
        assert options.cdi_devices == () and options.annotations == {}
    finally:
        process.stop()


def _grant_node_reader(admin: KubeClient, namespace: str, account: str) -> None:
    admin.apply_ok(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "fpga-test-node-getter"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
    )
    admin.apply_ok(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"fpga-test-node-getter-{account}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "fpga-test-node-getter",
            },
            "subjects": [{"kind": "ServiceAccount", "namespace": namespace, "name": account}],
        },
    )


def test_node_annotation_overrides_mode_with_a_service_account(
    device_manager: DeviceManagerHarness,
    k8s_admin: KubeClient,
    kwok_nodes: Callable[..., list[str]],
    service_account_kubeconfig: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    tree, _, _ = two_cards(tmp_path / "node", fpga.DFL)
    (node_name,) = kwok_nodes(1)
    k8s_admin.merge_patch(
        f"/api/v1/nodes/{node_name}",
        {"metadata": {"annotations": {"fpga.intel.com/device-plugin-mode": "region"}}},
    )
    allowed = service_account_kubeconfig("default", "fpga-plugin-allowed")
    _grant_node_reader(k8s_admin, "default", "fpga-plugin-allowed")
    denied = service_account_kubeconfig("default", "fpga-plugin-denied")

    process = start_plugin(
        tree.root, device_manager, "-mode", "af", "-kubeconfig", str(allowed), "-node-name", node_name
    )
    try:
        device_manager.wait_resource(REGION, capacity=2, allocatable=2)
        assert NLB0 not in device_manager.resources() or device_manager.resources()[NLB0].capacity == 0
    finally:
        process.stop()
    log = process.log_path.read_text(encoding="utf-8")
    assert "overrides -mode af" in log

    process = start_plugin(
        tree.root, device_manager, "-mode", "af", "-kubeconfig", str(denied), "-node-name", node_name
    )
    try:
        device_manager.wait_resource(NLB0, capacity=3, allocatable=3)
    finally:
        process.stop()
    log = process.log_path.read_text(encoding="utf-8")
    assert f"cannot read node {node_name}" in log and "forbidden" in log.lower()
