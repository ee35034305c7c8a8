"""CDI on the real node: containerd 2 delivers devices from the CDI specs the plugins write.

The plugins answer Allocate with CDI names as well as device specs, and write each named device's
spec into the node's /var/run/cdi (host side: ``RealNode.layout.cdi_run_dir``). A plugin writes a
device's spec once and leaves it alone while it exists, so a test can change a spec after the first
pod and watch the next pod of the same device: an edit that only the CDI spec carries (an
environment variable and an extra device node) reaching the container proves that containerd
resolved the CDI name, not that the kubelet's device specs did the work. The xe resource has one
card on the session node, so every pod asking for it gets the same device.

A spec the runtime cannot use (naming a missing device node, or not parsing at all) fails that
pod's container with containerd's reason as an event; the plugin keeps serving, and once the
broken file is gone the plugin writes it again and the next pod runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.plugins.fpga.bitstream.build import install_simulated_gbs
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH
from intel_device_plugins.plugins.fpga.fme import simulated_payload
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB0_AFU, NLB3_AFU
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.node import RealNode, workload_pod
from k8stest.node.plugins import PODS, SamplePlugin, run_to_completion, sample_plugin
from tests.node.cdi import (
    CDI_ONLY_NODE,
    CDI_ONLY_VARIABLE,
    FPGA_PORT_AFU_ID,
    REGION,
    XE,
    XE_SCRIPT,
    region_pod,
    remove_installed_hook,
    wait_for_warning,
    xe_spec,
)

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def gpu_plugin(
    real_node: RealNode, node_image: str, node_control_plane: ControlPlane
) -> Iterator[SamplePlugin]:
    """The operator's DaemonSet for the GpuDevicePlugin sample, with the xe card allocatable."""
    client = node_control_plane.client()
    try:
        with sample_plugin(client, real_node, DeviceKind("gpu"), node_image) as plugin:
            plugin.wait_advertised(client, {XE: str(plugin.spec["sharedDevNum"])})
            yield plugin
    finally:
        client.close()


def test_gpu_pod_gets_its_card_through_the_cdi_spec_the_plugin_wrote(
    gpu_plugin: SamplePlugin, client: KubeClient
) -> None:
    node = gpu_plugin.node
    pod, log = run_to_completion(client, node, workload_pod("cdi-xe", node.name, XE_SCRIPT, limits={XE: "1"}))
    assert pod["status"]["phase"] == "Succeeded", log
    path, spec = xe_spec(node)
    edits = spec["devices"][0]["containerEdits"]
    assert {n["path"] for n in edits["deviceNodes"]} == {"/dev/dri/card2", "/dev/dri/renderD130"}, spec
    assert any(m["containerPath"].startswith("/dev/dri/by-path/") for m in edits["mounts"]), spec

    # An edit only the CDI spec carries: the next pod on the same card must see it.
    edits.setdefault("env", []).append(f"{CDI_ONLY_VARIABLE}=card2")
    edits["deviceNodes"].append({"path": CDI_ONLY_NODE, "hostPath": "/dev/null"})
    original = path.read_bytes()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        script = f'{XE_SCRIPT}; echo "{CDI_ONLY_VARIABLE}=${CDI_ONLY_VARIABLE}"; test -c {CDI_ONLY_NODE}'
        pod, log = run_to_completion(
            client, node, workload_pod("cdi-xe-edit", node.name, script, limits={XE: "1"})
        )
        assert pod["status"]["phase"] == "Succeeded", log
        assert f"{CDI_ONLY_VARIABLE}=card2" in log, log
    finally:
        path.write_bytes(original)


def failed_start(client: KubeClient, node: RealNode, name: str, needle: str) -> str:
    """Create an xe pod, wait for a Warning event naming ``needle``; return it. The pod is deleted."""
    client.create(PODS, workload_pod(name, node.name, "true", limits={XE: "1"}))
    try:
        return wait_for_warning(client, name, needle)
    finally:
        client.delete(f"{PODS}/{name}")
        wait_for(f"pod {name} gone", lambda: not _exists(client, name), timeout=60)


def _exists(client: KubeClient, name: str) -> bool:
    return any(p["metadata"]["name"] == name for p in client.get(PODS)["items"])


@pytest.mark.parametrize(
    ("case", "needle"),
    [("missing-node", "k8stest-missing"), ("malformed", "unresolvable CDI devices")],
)
def test_a_spec_the_runtime_cannot_use_fails_only_that_pod(
    gpu_plugin: SamplePlugin, client: KubeClient, case: str, needle: str
) -> None:
    node = gpu_plugin.node
    # The spec exists once a pod got the card (the first test, or this one).
    pod, log = run_to_completion(
        client, node, workload_pod(f"cdi-{case}-before", node.name, "true", limits={XE: "1"})
    )
    assert pod["status"]["phase"] == "Succeeded", log
    path, spec = xe_spec(node)
    (plugin_pod,) = gpu_plugin.pods(client)
    if case == "missing-node":
        spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/dri/k8stest-missing"
        spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/dev/dri/k8stest-missing"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
    else:
        path.write_text("cdiVersion: [not, a, spec\n")

    event = failed_start(client, node, f"cdi-{case}", needle)
    assert "CDI" in event or "cdi" in event, event

    # The plugin kept serving: the same pod, its resource still allocatable.
    (same,) = gpu_plugin.pods(client)
    assert same["metadata"]["uid"] == plugin_pod["metadata"]["uid"]
    assert gpu_plugin.advertised(client, {XE: str(gpu_plugin.spec["sharedDevNum"])})
    # Without the broken file the plugin writes the spec again at the next allocation.
    path.unlink()
    pod, log = run_to_completion(
        client, node, workload_pod(f"cdi-{case}-after", node.name, XE_SCRIPT, limits={XE: "1"})
    )
    assert pod["status"]["phase"] == "Succeeded", log
    assert xe_spec(node)[1]["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/dri/card2"


@pytest.fixture(scope="module")
def fpga_region_plugin(
    real_node: RealNode, node_image: str, node_control_plane: ControlPlane
) -> Iterator[SamplePlugin]:
    """The operator's DaemonSet for the FpgaDevicePlugin sample, in the sample's region mode."""
    client = node_control_plane.client()
    try:
        with sample_plugin(client, real_node, DeviceKind.FPGA, node_image) as plugin:
            plugin.wait_advertised(client, {REGION: "1"})
            yield plugin
    finally:
        remove_installed_hook(real_node)
        client.close()


def test_fpga_region_pod_runs_the_installed_hook_from_the_cdi_spec(
    fpga_region_plugin: SamplePlugin, client: KubeClient
) -> None:
    """runc runs the hook only because the region's CDI spec names it; a bitstream the store lacks
    makes the hook refuse the container, with its reason in the pod's events."""
    node = fpga_region_plugin.node
    hook = node.layout.opt_dir / CRI_HOOK_PATH.removeprefix("/opt/")
    assert hook.is_file(), f"the init container did not install {CRI_HOOK_PATH} in the node's /opt"
    client.create(PODS, region_pod("fpga-missing-bitstream", node, NLB3_AFU))
    try:
        event = wait_for_warning(
            client, "fpga-missing-bitstream", f"{ARRIA10_INTERFACE}/{NLB3_AFU}: bitstream not found"
        )
    finally:
        client.delete(f"{PODS}/fpga-missing-bitstream")
    assert "hook" in event, event
    (spec,) = [
        yaml.safe_load(p.read_text()) for p in node.layout.cdi_run_dir.glob("intel.cdi.k8s.io-fpga-*.yaml")
    ]
    assert spec["devices"][0]["containerEdits"]["hooks"] == [
        {"hookName": "createRuntime", "path": CRI_HOOK_PATH}
    ]


def test_fpga_region_pod_starts_on_the_port_the_hook_programmed(
    fpga_region_plugin: SamplePlugin, client: KubeClient
) -> None:
    """With the requested bitstream in the node's store, the hook that runc runs from the CDI spec
    programs the simulated port (the node's sysfs marks its FME as simulated, the spec passes no
    flag) before the container starts: the container's first read of the port's afu_id is the
    bitstream's AFU, and afterwards the node's sysfs says so too."""
    node = fpga_region_plugin.node
    afu_id = node.layout.sys_dir / FPGA_PORT_AFU_ID.removeprefix("/sys/")
    assert afu_id.read_text().strip() == NLB0_AFU, "the session node's port must start on NLB0"
    # install_simulated_gbs writes <root>/srv/intel.com/fpga/...; the node sees srv_dir as /srv.
    bitstream = install_simulated_gbs(
        node.layout.srv_dir.parent, ARRIA10_INTERFACE, NLB3_AFU, simulated_payload(NLB3_AFU)
    )
    assert bitstream.is_relative_to(node.layout.srv_dir), bitstream
    try:
        script = f"echo afu_id=$(cat {FPGA_PORT_AFU_ID}); test $(cat {FPGA_PORT_AFU_ID}) = {NLB3_AFU}"
        pod, log = run_to_completion(client, node, region_pod("fpga-programmed", node, NLB3_AFU, script))
        # A refusal of the hook is in the container's terminated state (runc's "error running hook").
        assert pod["status"]["phase"] == "Succeeded", f"{pod['status'].get('containerStatuses')}\n{log}"
        assert f"afu_id={NLB3_AFU}" in log.splitlines(), log
        assert afu_id.read_text().strip() == NLB3_AFU
    finally:
        # The next modules (af mode, the missing-bitstream case) expect NLB0 running and no NLB3.
        afu_id.write_text(NLB0_AFU + "\n")
        bitstream.unlink()


SGX_REGISTRATION = "sgx.intel.com/registration"


@pytest.fixture(scope="module")
def sgx_dcap_plugin(
    real_node: RealNode, node_image: str, node_control_plane: ControlPlane
) -> Iterator[SamplePlugin]:
    """The SgxDevicePlugin sample with ``dcapInfraResources``: its registration resource carries the
    efivarfs CDI device."""
    client = node_control_plane.client()
    try:
        with sample_plugin(client, real_node, DeviceKind.SGX, node_image, dcapInfraResources=True) as plugin:
            plugin.wait_advertised(client, {SGX_REGISTRATION: "1"})
            yield plugin
    finally:
        client.close()


def test_sgx_registration_gets_the_efivarfs_mount_of_its_cdi_spec(
    sgx_dcap_plugin: SamplePlugin, client: KubeClient
) -> None:
    """Only the CDI spec holds the efivarfs mount at /run/efivars. On a kernel with efivarfs the
    container sees it mounted; on one without (this machine kind), runc, given the mount by
    containerd, fails it and says where. Either way the runtime applied the spec."""
    node = sgx_dcap_plugin.node
    name = "sgx-registration"
    if "efivarfs" in Path("/proc/filesystems").read_text():
        script = "grep ' /run/efivars efivarfs ' /proc/mounts"
        pod, log = run_to_completion(
            client, node, workload_pod(name, node.name, script, limits={SGX_REGISTRATION: "1"})
        )
        assert pod["status"]["phase"] == "Succeeded", log
    else:
        client.create(PODS, workload_pod(name, node.name, "true", limits={SGX_REGISTRATION: "1"}))
        try:
            event = wait_for_warning(client, name, "/run/efivars")
        finally:
            client.delete(f"{PODS}/{name}")
        assert "efivarfs" in event, event
    spec = yaml.safe_load((node.layout.cdi_run_dir / "intel.cdi.k8s.io-sgx-efivarfs.yaml").read_text())
    assert spec["devices"][0]["containerEdits"]["mounts"][0]["containerPath"] == "/run/efivars", spec
