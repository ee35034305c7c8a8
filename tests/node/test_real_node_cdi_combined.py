"""CDI from the combined process on the real node: the one DaemonSet the operator builds with
``--combined-plugin-process`` serves GPU and FPGA from one ``intel_device_plugins`` process, and
containerd 2 delivers their devices from the CDI specs that process writes (see
``test_real_node_cdi.py`` for the single-kind plugins and the CDI-only edit used here too).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator.combined import COMBINED_NAME, Member, combined_daemonset
from intel_device_plugins.operator.daemonset import Owner
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB3_AFU
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.node import RealNode, workload_pod
from k8stest.node.plugins import (
    PLUGIN_NAMESPACE,
    PODS,
    create_plugin_identity,
    delete_plugin_identity,
    plugin_identity,
    run_to_completion,
    sample_daemonset,
)
from tests.node.cdi import (
    REGION,
    XE,
    XE_SCRIPT,
    region_pod,
    remove_installed_hook,
    wait_for_warning,
    xe_spec,
)

pytestmark = pytest.mark.k8s

DAEMONSETS = f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets"


@pytest.fixture(scope="module")
def combined_plugin(
    real_node: RealNode, node_image: str, node_control_plane: ControlPlane
) -> Iterator[dict[str, Any]]:
    """The combined DaemonSet for the GPU and FPGA samples, running on the real node."""
    client = node_control_plane.client()
    kinds = (DeviceKind("gpu"), DeviceKind.FPGA)
    specs = {kind: sample_daemonset(kind, node_image)[0] for kind in kinds}
    identity = plugin_identity(DeviceKind.FPGA)
    account = next(o["metadata"]["name"] for o in identity if o["kind"] == "ServiceAccount")
    members = [
        Member(parse_spec(kind, specs[kind]), Owner(kind, f"sample-{kind.value}", "uid")) for kind in kinds
    ]
    ds = combined_daemonset(members, PLUGIN_NAMESPACE, fpga_service_account=account)
    ds["metadata"].pop("ownerReferences", None)
    labels = {k: v for spec in specs.values() for k, v in spec["nodeSelector"].items()}
    node_path = f"/api/v1/nodes/{real_node.name}"
    client.merge_patch(node_path, {"metadata": {"labels": labels}})
    client.apply_ok(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
    )
    create_plugin_identity(client, identity)
    client.create(DAEMONSETS, ds)
    try:
        expected = {XE: str(specs[DeviceKind("gpu")]["sharedDevNum"]), REGION: "1"}

        def advertised() -> bool:
            # The combined pod ready first: allocatable may still show plugins of an earlier module.
            pods = client.get(
                f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods?labelSelector=app%3D{COMBINED_NAME}"
            )
            ready = [
                p
                for p in pods["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])
                )
            ]
            allocatable = client.get(node_path)["status"]["allocatable"]
            return bool(ready) and all(allocatable.get(k) == v for k, v in expected.items())

        wait_for(f"{expected} from the combined process", advertised, timeout=120)
        yield ds
    finally:
        client.delete_if_present(f"{DAEMONSETS}/{COMBINED_NAME}")
        delete_plugin_identity(client, identity)
        client.merge_patch(node_path, {"metadata": {"labels": dict.fromkeys(labels)}})
        remove_installed_hook(real_node)
        client.close()


def test_combined_process_delivers_gpu_and_fpga_through_cdi(
    combined_plugin: dict[str, Any], real_node: RealNode, client: KubeClient
) -> None:
    container = combined_plugin["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["intel_device_plugins"], container
    kinds = [arg.split()[0] for arg in container["args"][3::2]]  # after "-v L", each "--plugin '<kind> …'"
    assert kinds == ["gpu", "fpga"], container["args"]
    node = real_node
    pod, log = run_to_completion(
        client, node, workload_pod("combined-xe", node.name, XE_SCRIPT, limits={XE: "1"})
    )
    assert pod["status"]["phase"] == "Succeeded", (
        pod["status"].get("reason"),
        pod["status"].get("message"),
        log,
    )
    path, spec = xe_spec(node)
    spec["devices"][0]["containerEdits"].setdefault("env", []).append("K8STEST_FROM_COMBINED=1")
    original = path.read_bytes()
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        script = f'{XE_SCRIPT}; test "$K8STEST_FROM_COMBINED" = 1'
        pod, log = run_to_completion(
            client, node, workload_pod("combined-xe-edit", node.name, script, limits={XE: "1"})
        )
        assert pod["status"]["phase"] == "Succeeded", log
    finally:
        path.write_bytes(original)

    client.create(PODS, region_pod("combined-fpga", node, NLB3_AFU))
    try:
        wait_for_warning(client, "combined-fpga", f"{ARRIA10_INTERFACE}/{NLB3_AFU}: bitstream not found")
    finally:
        client.delete(f"{PODS}/combined-fpga")
