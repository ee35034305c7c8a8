"""This project's node image on the real node, for FPGA: the DaemonSet the operator builds for the
FpgaDevicePlugin sample runs under containerd, its init container installs the CRI hook into the
node's ``/opt/intel/fpga-sw`` (the node's own ``/opt``, never the machine's), the plugin reads its
node's mode annotation with the ServiceAccount the operator's install ships, and a pod asking for
the advertised function gets the FPGA port's device node.

The node's simulated hardware is ``k8stest.node.fixtures.NODE_PROFILE``: one Arria 10 card on the
DFL driver whose single port runs native loopback 0. The node is annotated
``fpga.intel.com/device-plugin-mode=af`` before the plugin starts, so the sample's ``mode: region``
is overridden, which only works when the plugin may get its Node.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH, af_resource_name
from intel_device_plugins.plugins.fpga.nodemode import MODE_ANNOTATION
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB0_AFU
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node.plugins import PLUGIN_NAMESPACE, SamplePlugin, run_to_completion, sample_plugin

pytestmark = pytest.mark.k8s

AF = f"fpga.intel.com/{af_resource_name(ARRIA10_INTERFACE, NLB0_AFU)}"
REGION = f"fpga.intel.com/region-{ARRIA10_INTERFACE}"
PORT = "dfl-port.0"  # the profile's only port
MACHINE_HOOK_DIR = Path(CRI_HOOK_PATH).parent


def _listing(directory: Path) -> list[str] | None:
    """The entries of the machine's directory, or None when it does not exist."""
    return sorted(os.listdir(directory)) if directory.is_dir() else None


@pytest.fixture(scope="module")
def machine_hook_dir_before() -> list[str] | None:
    return _listing(MACHINE_HOOK_DIR)


@pytest.fixture(scope="module")
def fpga_plugin(
    real_node: RealNode,
    node_image: str,
    node_control_plane: ControlPlane,
    machine_hook_dir_before: list[str] | None,
) -> Iterator[SamplePlugin]:
    """The operator's DaemonSet for the FPGA sample on the real node, which asks for af mode."""
    client = node_control_plane.client()
    node_path = f"/api/v1/nodes/{real_node.name}"
    client.merge_patch(node_path, {"metadata": {"annotations": {MODE_ANNOTATION: "af"}}})
    try:
        with sample_plugin(client, real_node, DeviceKind.FPGA, node_image) as plugin:
            yield plugin
    finally:
        client.merge_patch(node_path, {"metadata": {"annotations": {MODE_ANNOTATION: None}}})
        client.close()


def test_fpga_plugin_follows_the_node_annotation_with_its_service_account(
    fpga_plugin: SamplePlugin, client: KubeClient
) -> None:
    """af-… appears (the annotation was read), region-… does not (the sample's -mode lost)."""
    fpga_plugin.wait_advertised(client, {AF: "1"})
    status = client.get(f"/api/v1/nodes/{fpga_plugin.node.name}")["status"]
    assert status["capacity"].get(AF) == "1"
    # "0" when an earlier module served the region on the session node: no region devices now.
    assert status["capacity"].get(REGION, "0") == "0", status["capacity"]
    (pod,) = fpga_plugin.pods(client)
    assert pod["spec"]["serviceAccountName"] == "intel-deviceplugins-fpga-plugin"
    log = pod_log(fpga_plugin.node, PLUGIN_NAMESPACE, pod["metadata"]["name"], "intel-fpga-plugin")
    assert "cannot read node" not in log, log
    assert "FPGA device plugin started in af mode" in log, log


def test_fpga_hook_is_installed_in_the_nodes_opt_only(
    fpga_plugin: SamplePlugin, client: KubeClient, machine_hook_dir_before: list[str] | None
) -> None:
    fpga_plugin.wait_advertised(client, {AF: "1"})  # the plugin runs, so the init container finished
    (pod,) = fpga_plugin.pods(client)
    init_log = pod_log(
        fpga_plugin.node, PLUGIN_NAMESPACE, pod["metadata"]["name"], "intel-fpga-initcontainer"
    )
    assert f"{CRI_HOOK_PATH}: installed" in init_log, init_log
    hook = fpga_plugin.node.layout.opt_dir / Path(CRI_HOOK_PATH).relative_to("/opt")
    assert hook.is_file() and os.access(hook, os.X_OK), f"{hook} missing or not executable"
    assert _listing(MACHINE_HOOK_DIR) == machine_hook_dir_before, f"the machine's {MACHINE_HOOK_DIR} changed"


def test_pod_asking_for_the_function_gets_the_fpga_port(
    fpga_plugin: SamplePlugin, client: KubeClient
) -> None:
    fpga_plugin.wait_advertised(client, {AF: "1"})
    node = fpga_plugin.node
    script = (
        "set -e; ls /dev | grep '^dfl-' | sed 's/^/dev /';"
        f" test -c /dev/{PORT}; stat -c 'major=%t' /dev/{PORT};"
        " test $(ls /dev | grep -c '^dfl-') -eq 1"
    )
    pod, log = run_to_completion(client, node, workload_pod("one-fpga", node.name, script, limits={AF: "1"}))
    assert pod["status"]["phase"] == "Succeeded", f"{pod['status']}\n{log}"
    assert f"dev {PORT}" in log.splitlines(), log
    assert "major=3c" in log, log  # the node's character device (major 60), not a plain file
