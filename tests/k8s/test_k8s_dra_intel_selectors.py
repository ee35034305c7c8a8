"""Intel's DRA drivers' own QAT selectors, and selectors on attributes some devices could lack, with the
real scheduler: published QAT VFs of a simulated node, claims as Intel's examples write them."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.classes import device_class, with_intel_extended_resources
from intel_device_plugins.dra.publisher import SlicePublisher
from intel_device_plugins.kube.rest import RestClient, kubeconfig_config
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.dra import QAT_DEVICE_CLASSES, QatDriverProfile
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin
from intel_device_plugins.sim.qat import FakeTreeBinder, load_driver
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
from tests.builders import two_socket_node

pytestmark = pytest.mark.k8s

NAMESPACE = "qat-intel-selectors"
QAT = "qat.intel.com"
# Intel's QAT test claim (deployments/qat/tests/resource-claim-template.yaml) selects crypto VFs with an
# OR-list over its services spellings.
INTEL_CRYPTO = " || ".join(
    f'device.attributes["{QAT}"].services == "{services}"'
    for services in ("sym", "sym;asym", "asym;sym", "sym;dc", "dc;sym")
)


def _claim(name: str, selector: str, class_name: str = QAT) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": class_name}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "qat", "exactly": request}]}},
    }


def _pod(
    name: str, node: str, claim: str | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "busybox"}
    spec: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "qat", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "qat"}]}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _scheduled(client: KubeClient, pod: str) -> str | None:
    found = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}")
    if found["spec"].get("nodeName"):
        return "bound"
    for condition in found["status"].get("conditions", []):
        if (
            condition["type"] == "PodScheduled"
            and condition["status"] == "False"
            and condition.get("message")
        ):
            return "refused: " + str(condition["message"])
    return None


async def _publish(control_plane: ControlPlane, node: str, root: Path) -> None:
    tree = two_socket_node(
        root, "[[qat]]\nvfs = 3\nservices = 'sym;asym'\n[[qat]]\nvfs = 1\nservices = 'dc'\nnuma_node = -1\n"
    )
    load_driver(tree, "vfio-pci")
    profile = QatDriverProfile(QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=FakeTreeBinder(tree)))
    rest = RestClient(kubeconfig_config(control_plane.admin_kubeconfig), field_manager="dra-test")
    try:
        await SlicePublisher(rest, QAT, node).publish(profile.scan())
    finally:
        await rest.close()


def test_intels_selectors_allocate_with_the_new_spelling_and_names(
    k8s_control_plane: ControlPlane, k8s_admin: KubeClient, kwok_nodes: Any, tmp_path: Path
) -> None:
    (node,) = kwok_nodes(1)
    asyncio.run(_publish(k8s_control_plane, node, tmp_path / "node"))
    classes = [device_class(spec) for spec in with_intel_extended_resources(QAT_DEVICE_CLASSES)]
    for body in classes:
        k8s_admin.apply_ok("/apis/resource.k8s.io/v1/deviceclasses", body)
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"

    def allocated(claim: str) -> str:
        result = k8s_admin.get(f"{claims}/{claim}")["status"]["allocation"]["devices"]["results"][0]
        return str(result["device"])

    try:
        cases = {
            # Intel's own example: a crypto VF; only the sym;asym PF's VFs match.
            "intel-crypto": INTEL_CRYPTO,
            # The whole-allocation abort this guards against: numaNode is there on the VF without a node too.
            "numa-0": f'device.attributes["{QAT}"].numaNode == 0',
            "dc": f'device.attributes["{QAT}"].dc',
        }
        for name, selector in cases.items():
            k8s_admin.create(claims, _claim(name, selector))
            k8s_admin.create(pods, _pod(name, node, claim=name))
            state = wait_for(f"pod {name} scheduled", partial(_scheduled, k8s_admin, name), timeout=60)
            assert state == "bound", state
        assert allocated("intel-crypto").startswith("qatvf-0000-")
        dc = k8s_admin.get(f"{claims}/dc")["status"]["allocation"]["devices"]["results"][0]["device"]
        assert dc not in (allocated("intel-crypto"), allocated("numa-0"))
        # Intel's opt-in extended resource: the pod asks intel.com/qat and gets the last free VF.
        k8s_admin.create(pods, _pod("extended", node, limits={"intel.com/qat": "1"}))
        state = wait_for(
            "the extended-resource pod scheduled", partial(_scheduled, k8s_admin, "extended"), timeout=60
        )
        assert state == "bound", state
    finally:
        k8s_admin.delete_if_present(f"/api/v1/namespaces/{NAMESPACE}")
        for body in classes:
            k8s_admin.delete_if_present(f"/apis/resource.k8s.io/v1/deviceclasses/{body['metadata']['name']}")
