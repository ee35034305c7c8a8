"""Unchanged FPGA workloads served by the FPGA DRA driver on a real node, through the FPGA webhook.

A node of its own (``k8stest-dra-fpga-node``: one Arria 10 card whose one port runs NLB0) joins the
session's control plane. The standalone FPGA webhook runs on the session's node (the one the API
server reaches pods through) from the operator image, installed
from ``deploy/webhooks/fpga/self-signed`` with the opt-in ``deviceclasses`` component, so it keeps
the driver's DeviceClasses in step with the AcceleratorFunctions below. No device plugin serves
the node: a pod asking for an AcceleratorFunction's name (``fpga.intel.com/arria10.dcp1.2-nlb0``),
with no claim, is rewritten by the webhook to the plugin's name, and the scheduler serves that name
through the class the webhook made, from the driver's slices.

1. af mode: the pod gets the port running the function.
2. region mode: the pod asking for a region-mode function gets the region, and the driver's
   ``createRuntime`` hook, finding no function in the scheduler's claim, programs the one the
   webhook put in the container's ``FPGA_AFU_1`` before the container starts.

Needs the node and operator images from ``make images`` with this code in them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga.bitstream.build import install_simulated_gbs
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH, af_resource_name
from intel_device_plugins.plugins.fpga.fme import simulated_payload
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB0_AFU, NLB3_AFU
from intel_device_plugins.webhooks.fpgaclasses import af_class_name, region_class_name
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, KubeClient, wait_for
from k8stest.node import NodeBinaries, RealNode, pod_log
from k8stest.node.dra import allocated_devices
from k8stest.node.dradriver import DraDriver, install_dra_driver
from k8stest.node.drakinds import (
    LIST_DEV,
    PODS,
    claim_pod,
    delete_pod_and_claims,
    pod_claims,
    pod_devices,
    wait_phase,
)
from k8stest.node.fixtures import own_image_node
from k8stest.node.fpgawebhook import FpgaWebhook, install_fpga_webhook

pytestmark = pytest.mark.k8s

NODE = "k8stest-dra-fpga-node"
PROFILE = f'[node]\nname = "{NODE}"\n[[fpga]]\ncount = 1\n'
FPGA = "fpga.intel.com"
IFACE, NLB0, NLB3 = (i.replace("-", "").lower() for i in (ARRIA10_INTERFACE, NLB0_AFU, NLB3_AFU))
AF_FUNCTION, REGION_FUNCTION = "arria10.dcp1.2-nlb0", "arria10.dcp1.2-nlb3"
AF_RESOURCE = f"{FPGA}/{af_resource_name(IFACE, NLB0)}"
REGION_RESOURCE = f"{FPGA}/region-{IFACE}"
FUNCTIONS = "/apis/fpga.intel.com/v2/namespaces/default/acceleratorfunctions"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
PORT_AFU_ID = "/sys/bus/platform/devices/dfl-port.0/afu_id"


def function(name: str, afu: str, mode: str) -> JSON:
    return {
        "apiVersion": "fpga.intel.com/v2",
        "kind": "AcceleratorFunction",
        "metadata": {"name": name},
        "spec": {"afuId": afu, "interfaceId": IFACE, "mode": mode},
    }


@pytest.fixture(scope="module")
def fpga_node(
    real_node: RealNode,
    node_binaries: NodeBinaries,
    node_control_plane: ControlPlane,
    node_images: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    """The FPGA card's node; it joins after the session's node, which keeps the API server's way into the
    cluster (the webhook runs there)."""
    with own_image_node(
        node_binaries,
        node_control_plane,
        node_images,
        tmp_path_factory.mktemp("dra-fpga-node"),
        NODE,
        PROFILE,
        "PROFILE",
    ) as node:
        yield node


@pytest.fixture(scope="module")
def webhook(
    real_node: RealNode,
    fpga_node: RealNode,
    node_control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FpgaWebhook]:
    """The webhook (on the session's node, which the API server reaches), two AcceleratorFunctions (af and
    region mode) and the classes it made for them."""
    installed = install_fpga_webhook(node_control_plane, real_node, tmp_path_factory.mktemp("fpga-webhook"))
    client = node_control_plane.client()
    try:
        client.create(FUNCTIONS, function(AF_FUNCTION, NLB0, "af"))
        client.create(FUNCTIONS, function(REGION_FUNCTION, NLB3, "region"))
        wanted = {af_class_name(IFACE, NLB0): AF_RESOURCE, region_class_name(IFACE): REGION_RESOURCE}

        def made() -> bool:
            classes = {c["metadata"]["name"]: c for c in client.get(CLASSES)["items"]}
            return all(
                classes.get(n, {}).get("spec", {}).get("extendedResourceName") == r for n, r in wanted.items()
            )

        try:
            wait_for("the webhook's DeviceClasses", made, timeout=60)
        except TimeoutError as error:
            raise AssertionError(f"{error}; webhook log:\n{installed.log()[-4000:]}") from None
        yield installed
    finally:
        for name in (AF_FUNCTION, REGION_FUNCTION):
            client.delete_if_present(f"{FUNCTIONS}/{name}")
        client.close()
        installed.uninstall()


@pytest.fixture
def driver_in(
    fpga_node: RealNode, node_control_plane: ControlPlane, tmp_path: Path
) -> Iterator[Callable[[str], DraDriver]]:
    """Installs ``deploy/dra/fpga`` in the mode a test asks for; removed after the test."""
    installed: list[DraDriver] = []

    def install(mode: str) -> DraDriver:
        args = () if mode == "af" else ("-mode", mode)
        installed.append(install_dra_driver(node_control_plane, fpga_node, "fpga", tmp_path, args=args))
        return installed[-1]

    try:
        yield install
    finally:
        client = node_control_plane.client()
        try:
            for driver in installed:
                driver.uninstall(client)
        finally:
            client.close()
        # The FPGA init container installed the CRI hook in the node's own /opt.
        hook_dir = fpga_node.layout.opt_dir / Path(CRI_HOOK_PATH).parent.relative_to("/opt")
        shutil.rmtree(hook_dir, ignore_errors=True)


def _run(client: KubeClient, node: RealNode, name: str, resource: str, script: str) -> tuple[JSON, JSON]:
    """A pod asking for ``resource`` (one), no claim; once Running: (pod, the scheduler's claim)."""
    client.create(PODS, claim_pod(name, NODE, {}, limits={resource: "1"}, script=script))
    pod = wait_phase(client, node, name, ("Running",))
    (claim,) = pod_claims(client, name)
    status = pod["status"].get("extendedResourceClaimStatus") or {}
    assert status.get("resourceClaimName") == claim["metadata"]["name"], pod["status"]
    return pod, claim


def _class_of(claim: JSON) -> str:
    (request,) = claim["spec"]["devices"]["requests"]
    return str(request["exactly"]["deviceClassName"])


def test_af_function_name_without_a_claim_gets_the_port_from_the_driver(
    webhook: FpgaWebhook, driver_in: Callable[[str], DraDriver], client: KubeClient
) -> None:
    driver = driver_in("af")
    driver.wait_published(client, {"0000-10-00-0-port0"})
    node = driver.node
    name = "fpga-af-function"
    try:
        pod, claim = _run(client, node, name, f"{FPGA}/{AF_FUNCTION}", f"{LIST_DEV}; sleep 3600")
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits == {AF_RESOURCE: "1"}, f"the webhook did not map the function: {limits}"
        assert _class_of(claim) == af_class_name(IFACE, NLB0)
        assert allocated_devices(claim) == [f"{NODE}/0000-10-00-0-port0"]
        devices = pod_devices(node, name)
        assert "dfl-port.0" in devices, f"the container has no port: {sorted(devices)}"
        assert not any("fme" in d for d in devices), f"af mode gives no FME: {sorted(devices)}"
    finally:
        delete_pod_and_claims(client, node, name, [FPGA])


def test_region_function_name_without_a_claim_is_programmed_before_the_container_starts(
    webhook: FpgaWebhook, driver_in: Callable[[str], DraDriver], client: KubeClient
) -> None:
    driver = driver_in("region")
    driver.wait_published(client, {"0000-10-00-0-region"})
    node = driver.node
    afu_id = node.layout.sys_dir / PORT_AFU_ID.removeprefix("/sys/")
    assert afu_id.read_text().strip() == NLB0, "the port must start on NLB0"
    bitstream = install_simulated_gbs(
        node.layout.srv_dir.parent, ARRIA10_INTERFACE, NLB3_AFU, simulated_payload(NLB3_AFU)
    )
    name = "fpga-region-function"
    script = f'echo "afu $(cat {PORT_AFU_ID})"; env | grep "^FPGA_" | while read -r v; do echo "env $v"; done'
    try:
        pod, claim = _run(
            client, node, name, f"{FPGA}/{REGION_FUNCTION}", f"{LIST_DEV}; {script}; sleep 3600"
        )
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"] == {REGION_RESOURCE: "1"}, container["resources"]
        assert _class_of(claim) == region_class_name(IFACE)
        assert allocated_devices(claim) == [f"{NODE}/0000-10-00-0-region"]
        assert not claim["spec"]["devices"].get("config"), "the scheduler's claim names no function"
        assert "dfl-port.0" in pod_devices(node, name)
        lines = pod_log(node, "default", name).splitlines()
        assert f"afu {NLB3}" in lines, f"the container read another function first: {lines}"
        env = {line.removeprefix("env ") for line in lines if line.startswith("env ")}
        assert env == {f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}"}, env
        assert afu_id.read_text().strip() == NLB3, "the node's port does not run the function"
    finally:
        delete_pod_and_claims(client, node, name, [FPGA])
        afu_id.write_text(NLB0 + "\n")
        bitstream.unlink()
