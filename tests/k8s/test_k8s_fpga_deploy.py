"""``deploy/fpga_plugin`` on a real API server: the operator's pod plus a ServiceAccount that may
read nodes, and nothing more."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.plugins.fpga.cli import build_parser, resolve_mode
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.nodemode import MODE_ANNOTATION
from k8stest.binaries import Binaries, repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient
from k8stest.operatorinstall import Kubectl

pytestmark = pytest.mark.k8s

NAMESPACE = "intel-fpga-plugin"


def overlay(name: str) -> Path:
    root = repo_root()
    assert root is not None, "deploy/ is only in a checkout"
    return root / "deploy" / "fpga_plugin" / "overlays" / name


def rendered(kubectl: Kubectl, name: str) -> dict[str, dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(kubectl("kustomize", str(overlay(name))).stdout) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in documents}


@pytest.fixture
def kubectl(k8s_binaries: Binaries, k8s_control_plane: ControlPlane) -> Kubectl:
    return Kubectl(k8s_binaries.path("kubectl"), k8s_control_plane.admin_kubeconfig)


@pytest.mark.parametrize("mode", [Mode.AF, Mode.REGION])
def test_overlay_pod_is_the_operators_with_its_own_service_account(kubectl: Kubectl, mode: Mode) -> None:
    objects = rendered(kubectl, mode.value)
    pod = objects["DaemonSet/intel-fpga-plugin"]["spec"]["template"]["spec"]
    spec = parse_spec(DeviceKind.FPGA, {"image": node_image(), "mode": mode.value})
    operator_pod = desired_daemonset(
        spec, Owner(DeviceKind.FPGA, "x", "u"), NAMESPACE, fpga_service_account="intel-fpga-plugin"
    )["spec"]["template"]["spec"]
    assert pod == operator_pod
    (container,) = pod["containers"]
    assert build_parser().parse_args(container["args"]).mode is mode
    binding = objects["ClusterRoleBinding/intel-fpga-plugin-node-getter"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "intel-fpga-plugin", "namespace": NAMESPACE}
    ]
    assert objects["ClusterRole/intel-fpga-plugin-node-getter"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]


def test_service_account_reads_the_mode_annotation_and_nothing_more(
    kubectl: Kubectl,
    k8s_control_plane: ControlPlane,
    k8s_admin: KubeClient,
    kwok_nodes: Callable[..., list[str]],
) -> None:
    kubectl("apply", "-k", str(overlay("region")))
    try:
        (node,) = kwok_nodes(1)
        k8s_admin.merge_patch(
            f"/api/v1/nodes/{node}", {"metadata": {"annotations": {MODE_ANNOTATION: "regiondevel"}}}
        )
        config = k8s_control_plane.service_account_kubeconfig(NAMESPACE, "intel-fpga-plugin", create=False)
        args = build_parser().parse_args(["-mode", "af", "-kubeconfig", str(config), "-node-name", node])
        assert resolve_mode(args) is Mode.REGIONDEVEL
        can_i = Kubectl(kubectl.binary, config)
        assert can_i("auth", "can-i", "get", "nodes").stdout.strip() == "yes"
        for verb, resource in (("list", "nodes"), ("patch", "nodes"), ("get", "pods"), ("get", "secrets")):
            answer = can_i("auth", "can-i", verb, resource, "-A", check=False).stdout.strip()
            assert answer == "no", f"{verb} {resource}: {answer}"
    finally:
        kubectl("delete", "-k", str(overlay("region")), "--ignore-not-found", "--wait=false", check=False)
