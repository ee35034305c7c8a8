"""The DRA drivers of DSA, IAA, SGX, DLB, NPU, QAT and FPGA from the node image on a real node, end
to end.

A node of its own (``k8stest-dra-kinds-node``, :data:`k8stest.node.drakinds.KINDS_NODE_PROFILE`)
joins the session's control plane; ``deploy/dra/<kind>`` of each kind, applied as a user applies
it, runs that kind's driver there, and no device plugin serves the node. The scenarios of issue #21:

1. DSA: two pods share the one shared work queue, the dedicated queue goes to one pod only (a
   second claim on it stays Pending with the scheduler's reason, and runs once the first is gone);
   each container sees its queue's device node and no other. IAA runs the same code; its queue is
   served below, through its extended resource.
2. SGX: two pods' EPC requests fit beside each other, a third that would exceed the node's EPC
   stays Pending; the containers get /dev/sgx_enclave.
3. A pod asking an extended resource (``dsa.intel.com/wq-user-dedicated: 1``,
   ``sgx.intel.com/enclave: 1``, ...) with no claim runs, served by DRA through the DeviceClass.
4. DLB and NPU: a claim gets exactly its device node.
5. QAT in DPDK mode: a claim gets its VF's vfio group node (and /dev/vfio/vfio) and
   ``QAT1=<address>`` in the container's environment.
6. FPGA region mode: a claim's opaque configuration (``FpgaConfig`` ``afuId``) names the function; the
   CRI hook programs the region before the container starts.
7. Every kind's driver killed during prepare and restarted after it, and the kubelet restarted,
   while pods hold a claim of each kind: the pods keep running, the drivers publish again, and once
   the pods are gone nothing is left (CDI specs, checkpoint entries). One device of every kind that
   can be hot-plugged (all but SGX) is published when plugged, serves a claim selecting it, and is
   withdrawn when unplugged under its pod. The kinds go through each scenario together, so the
   node's one kubelet restart and one retry of the kubelet's prepare serve them all; every failure
   names the kind.
8. QAT in kernel mode (``deploy/dra/qat/kernel``, last: it replaces the DPDK-mode driver): a claim
   of the class ``cy1-dc0.qat.intel.com`` gets its section's ``QAT_SECTION_NAME*`` and the
   driver's nodes; ``qat.intel.com/cy0_dc1: 1`` without a claim is served by DRA.

Every failure message names what is missing. Needs the node image from ``make images`` with the
drivers in it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga.bitstream.build import install_simulated_gbs
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH
from intel_device_plugins.plugins.fpga.fme import simulated_payload
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB0_AFU, NLB3_AFU
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, KubeClient, wait_for
from k8stest.node import NodeBinaries, RealNode, pod_log
from k8stest.node.dra import (
    allocated_devices,
    claim_template,
    created,
    events,
    leftovers,
    node_slices,
    published_devices,
    wait_claim_allocated,
)
from k8stest.node.dradriver import DraDriver, driver_connections, install_dra_driver
from k8stest.node.drakinds import (
    HOT_PLUG,
    KINDS_NODE_NAME,
    KINDS_NODE_PROFILE,
    LIST_DEV,
    PODS,
    claim_pod,
    delete_pod_and_claims,
    hot_plug,
    pod_claims,
    pod_devices,
    wait_phase,
)
from k8stest.node.fixtures import own_image_node
from k8stest.node.plugins import unschedulable_message

pytestmark = pytest.mark.k8s

NODE = KINDS_NODE_NAME
DSA, SGX, DLB, NPU, QAT = "dsa.intel.com", "sgx.intel.com", "dlb.intel.com", "npu.intel.com", "qat.intel.com"
FPGA, IAA = "fpga.intel.com", "iaa.intel.com"
QAT_VFS = {"qatvf-0000-13-00-1": "0000:13:00.1", "qatvf-0000-13-00-2": "0000:13:00.2"}
# Kind (deploy/dra/<kind>) -> its driver and the devices it publishes for the node.
KINDS = {
    "dsa": (DSA, {"0000-10-00-0-wq0", "0000-10-00-0-wq1"}),
    "sgx": (SGX, {"enclave", "provision"}),
    "dlb": (DLB, {"0000-11-00-0"}),
    "npu": (NPU, {"0000-12-00-0"}),
    "qat": (QAT, set(QAT_VFS)),
    "fpga": (FPGA, {"0000-14-00-0-region"}),
    "iaa": (IAA, {"0000-15-00-0-wq0"}),
}
# Arguments added to a kind's shipped ones: FPGA in region mode (the shipped mode is af).
ARGS = {"fpga": ("-mode", "region")}
DRIVERS = [driver for driver, _ in KINDS.values()]
MIB = 1 << 20


@pytest.fixture(scope="module")
def kinds_node(
    node_binaries: NodeBinaries,
    node_control_plane: ControlPlane,
    node_images: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    """A node of its own with :data:`KINDS_NODE_PROFILE`'s devices and the project's node image."""
    with own_image_node(
        node_binaries,
        node_control_plane,
        node_images,
        tmp_path_factory.mktemp("dra-kinds-node"),
        NODE,
        KINDS_NODE_PROFILE,
        "KINDS_NODE_PROFILE",
    ) as node:
        yield node


@pytest.fixture(scope="module")
def drivers(
    kinds_node: RealNode, node_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, DraDriver]]:
    """``deploy/dra/<kind>`` applied for the node, for every kind of :data:`KINDS`, each publishing
    its devices."""
    work = tmp_path_factory.mktemp("dra-kinds-install")
    client = node_control_plane.client()
    installed: dict[str, DraDriver] = {}
    try:
        for kind, (name, devices) in KINDS.items():
            driver = install_dra_driver(node_control_plane, kinds_node, kind, work, args=ARGS.get(kind, ()))
            installed[kind] = driver
            assert driver.driver == name, f"deploy/dra/{kind} names driver {driver.driver}, expected {name}"
            driver.wait_published(client, devices)
        yield installed
    finally:
        for driver in installed.values():
            driver.uninstall(client)
        client.close()
        # The FPGA init container installed the CRI hook in the node's own /opt.
        shutil.rmtree(
            kinds_node.layout.opt_dir / Path(CRI_HOOK_PATH).parent.relative_to("/opt"), ignore_errors=True
        )


@pytest.fixture(scope="module")
def baseline(drivers: dict[str, DraDriver], node_control_plane: ControlPlane) -> set[str]:
    """The character devices a pod with no claim sees under /dev (the runtime's own)."""
    node = next(iter(drivers.values())).node
    client = node_control_plane.client()
    try:
        client.create(PODS, claim_pod("no-claim", NODE, {}))
        try:
            wait_phase(client, node, "no-claim", ("Running",))
            return pod_devices(node, "no-claim")
        finally:
            delete_pod_and_claims(client, node, "no-claim", DRIVERS)
    finally:
        client.close()


def _templates(*templates: JSON) -> list[JSON]:
    return [{**t, "metadata": {**t["metadata"], "namespace": "default"}} for t in templates]


def _start(client: KubeClient, node: RealNode, name: str, template: str, **limits: str) -> tuple[JSON, JSON]:
    """A pod with one claim from ``template`` (``dev``), once Running: (pod, its claim)."""
    client.create(PODS, claim_pod(name, NODE, {"dev": template} if template else {}, limits=limits))
    pod = wait_phase(client, node, name, ("Running",))
    (claim,) = pod_claims(client, name)
    return pod, claim


def _extra_devices(node: RealNode, name: str, baseline: set[str]) -> set[str]:
    """The device nodes pod ``name`` sees beyond a pod with no claim. A DSA queue comes with udev's
    ``/dev/char/<major>:<minor>`` link to it, whose numbers the node chose: it counts as ``char``."""
    extra = pod_devices(node, name) - baseline
    links = {p for p in extra if p.startswith("char/")}
    assert len(links) <= 1, f"pod {name} got several /dev/char nodes: {sorted(links)}"
    return (extra - links) | ({"char"} if links else set())


# ----- 1. DSA: shared and dedicated work queues ----------------------------------------------------


def test_dsa_shared_queue_serves_two_pods_and_dedicated_one_pod_only(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    node = drivers["dsa"].node
    templates = _templates(
        claim_template("dsa-shared", "wq-user-shared.dsa.intel.com"),
        claim_template("dsa-dedicated", "wq-user-dedicated.dsa.intel.com"),
    )
    pods = ("shared-a", "shared-b", "dedicated-a", "dedicated-b")
    with created(client, templates):
        try:
            shared = [_start(client, node, name, "dsa-shared")[1] for name in ("shared-a", "shared-b")]
            assert [allocated_devices(c) for c in shared] == [[f"{NODE}/0000-10-00-0-wq1"]] * 2, (
                "both claims of the shared class should hold the one shared queue"
            )
            share_ids = {c["status"]["allocation"]["devices"]["results"][0].get("shareID") for c in shared}
            assert len(share_ids) == 2 and None not in share_ids, f"shareIDs {share_ids}"
            for name in ("shared-a", "shared-b"):
                assert _extra_devices(node, name, baseline) == {"dsa/wq0.1", "char"}, f"devices in {name}"

            _, dedicated = _start(client, node, "dedicated-a", "dsa-dedicated")
            assert allocated_devices(dedicated) == [f"{NODE}/0000-10-00-0-wq0"]
            assert _extra_devices(node, "dedicated-a", baseline) == {"dsa/wq0.0", "char"}, (
                "devices in dedicated-a"
            )

            client.create(PODS, claim_pod("dedicated-b", NODE, {"dev": "dsa-dedicated"}))
            message = unschedulable_message(client, "dedicated-b")
            assert "cannot allocate all claims" in message, message
            assert client.get(f"{PODS}/dedicated-b")["status"]["phase"] == "Pending"

            delete_pod_and_claims(client, node, "dedicated-a", DRIVERS)
            wait_phase(client, node, "dedicated-b", ("Running",))
            (second,) = pod_claims(client, "dedicated-b")
            assert allocated_devices(second) == [f"{NODE}/0000-10-00-0-wq0"]
        finally:
            for name in pods:
                delete_pod_and_claims(client, node, name, DRIVERS)


# ----- 2. SGX: EPC as consumable capacity -----------------------------------------------------------


def _epc_bytes(client: KubeClient) -> int:
    value = str(published_devices(client, NODE, SGX)["enclave"]["capacity"]["epc"]["value"])
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)):
        if value.endswith(suffix):
            return int(value.removesuffix(suffix)) * factor
    return int(value)


def test_sgx_epc_requests_fit_until_the_nodes_epc_is_used_up(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    """The node has 64 MiB of EPC: two claims of 24 MiB run, a third stays Pending with the
    scheduler's reason, and runs once one of the two is gone."""
    node = drivers["sgx"].node
    assert _epc_bytes(client) == 64 * MIB, published_devices(client, NODE, SGX)["enclave"]
    templates = _templates(claim_template("epc-24m", "enclave.sgx.intel.com", capacity={"epc": "24Mi"}))
    pods = ("epc-a", "epc-b", "epc-c")
    with created(client, templates):
        try:
            for name in ("epc-a", "epc-b"):
                _, claim = _start(client, node, name, "epc-24m")
                assert allocated_devices(claim) == [f"{NODE}/enclave"]
                result = claim["status"]["allocation"]["devices"]["results"][0]
                assert result.get("consumedCapacity", {}).get("epc") == "24Mi", result
                assert _extra_devices(node, name, baseline) == {"sgx_enclave"}, f"devices in {name}"

            client.create(PODS, claim_pod("epc-c", NODE, {"dev": "epc-24m"}))
            message = unschedulable_message(client, "epc-c")
            assert "cannot allocate all claims" in message, message
            assert client.get(f"{PODS}/epc-c")["status"]["phase"] == "Pending"

            delete_pod_and_claims(client, node, "epc-a", DRIVERS)
            wait_phase(client, node, "epc-c", ("Running",))
        finally:
            for name in pods:
                delete_pod_and_claims(client, node, name, DRIVERS)


# ----- 3. extended resources served by DRA -------------------------------------------------------

# Extended resource -> (the device that must serve it, the device nodes the container must get).
EXTENDED = {
    "dsa.intel.com/wq-user-dedicated": ("0000-10-00-0-wq0", {"dsa/wq0.0", "char"}),
    "dsa.intel.com/wq-user-shared": ("0000-10-00-0-wq1", {"dsa/wq0.1", "char"}),
    "iaa.intel.com/wq-user-dedicated": ("0000-15-00-0-wq0", {"iax/wq1.0", "char"}),
    "sgx.intel.com/enclave": ("enclave", {"sgx_enclave"}),
    "dlb.intel.com/pf": ("0000-11-00-0", {"dlb0"}),
    "npu.intel.com/accel": ("0000-12-00-0", {"accel/accel0"}),
}


@pytest.mark.parametrize("resource", sorted(EXTENDED))
def test_extended_resource_without_a_claim_is_served_by_dra(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str], resource: str
) -> None:
    node = next(iter(drivers.values())).node
    device, paths = EXTENDED[resource]
    name = "ext-" + resource.split(".", 1)[0] + "-" + resource.rsplit("/", 1)[1]
    try:
        pod, claim = _start(client, node, name, "", **{resource: "1"})
        status = pod["status"].get("extendedResourceClaimStatus")
        assert status and status.get("resourceClaimName"), f"no extendedResourceClaimStatus: {pod['status']}"
        assert claim["metadata"]["name"] == status["resourceClaimName"]
        assert allocated_devices(claim) == [f"{NODE}/{device}"], f"{resource} served by the wrong device"
        assert _extra_devices(node, name, baseline) == paths, f"devices in {name}"
    finally:
        delete_pod_and_claims(client, node, name, DRIVERS)


# ----- 4. DLB and NPU: exactly the device node ---------------------------------------------------


@pytest.mark.parametrize(
    ("class_name", "device", "path"),
    [("pf.dlb.intel.com", "0000-11-00-0", "dlb0"), ("accel.npu.intel.com", "0000-12-00-0", "accel/accel0")],
)
def test_claim_gets_exactly_its_device_node(
    drivers: dict[str, DraDriver],
    client: KubeClient,
    baseline: set[str],
    class_name: str,
    device: str,
    path: str,
) -> None:
    node = next(iter(drivers.values())).node
    name = "one-" + class_name.split(".")[1]
    with created(client, _templates(claim_template(name, class_name))):
        try:
            _, claim = _start(client, node, name, name)
            assert allocated_devices(claim) == [f"{NODE}/{device}"]
            assert _extra_devices(node, name, baseline) == {path}, f"devices in {name}"
        finally:
            delete_pod_and_claims(client, node, name, DRIVERS)


# ----- 5. QAT in DPDK mode: the VF's vfio group and QAT1 -----------------------------------------

PRINT_QAT = 'env | grep "^QAT" | while read -r v; do echo "env $v"; done; true'


def _iommu_group(node: RealNode, address: str) -> str:
    """The IOMMU group of PCI function ``address`` as the node's sysfs says."""
    return (node.layout.sys_dir / "bus" / "pci" / "devices" / address / "iommu_group").resolve().name


def test_qat_claim_gets_its_vfs_vfio_group_and_address(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    node = drivers["qat"].node
    name = "one-qat"
    with created(client, _templates(claim_template(name, "cy.qat.intel.com"))):
        try:
            script = f"{LIST_DEV}; {PRINT_QAT}; sleep 3600"
            client.create(PODS, claim_pod(name, NODE, {"dev": name}, script=script))
            wait_phase(client, node, name, ("Running",))
            (claim,) = pod_claims(client, name)
            (device,) = allocated_devices(claim)
            vf = device.split("/")[1]
            address = QAT_VFS[vf]
            group = _iommu_group(node, address)
            assert _extra_devices(node, name, baseline) == {f"vfio/{group}", "vfio/vfio"}, (
                f"devices in {name}"
            )
            env = {line.removeprefix("env ") for line in pod_log(node, "default", name).splitlines()}
            assert {e for e in env if e.startswith("QAT")} == {f"QAT1={address}"}, f"QAT environment of {vf}"
        finally:
            delete_pod_and_claims(client, node, name, DRIVERS)


def test_qat_extended_resource_without_a_claim_gets_one_vf(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    """``qat.intel.com/cy: 1``, the plugin's resource, is served by the QAT driver through its class."""
    node = drivers["qat"].node
    name = "ext-qat-cy"
    try:
        script = f"{LIST_DEV}; {PRINT_QAT}; sleep 3600"
        client.create(PODS, claim_pod(name, NODE, {}, limits={"qat.intel.com/cy": "1"}, script=script))
        wait_phase(client, node, name, ("Running",))
        (claim,) = pod_claims(client, name)
        (device,) = allocated_devices(claim)
        address = QAT_VFS[device.split("/")[1]]
        assert _extra_devices(node, name, baseline) == {f"vfio/{_iommu_group(node, address)}", "vfio/vfio"}
        env = {line.removeprefix("env ") for line in pod_log(node, "default", name).splitlines()}
        assert {e for e in env if e.startswith("QAT")} == {f"QAT1={address}"}, "QAT environment"
    finally:
        delete_pod_and_claims(client, node, name, DRIVERS)


# ----- 6. FPGA region mode: programmed before the container starts -----------------------------

FPGA_PORT_AFU_ID = "/sys/bus/platform/devices/dfl-port.0/afu_id"


def test_fpga_region_claim_programs_the_requested_function_before_the_container_starts(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    """A claim on the region names the function in its opaque configuration for the driver; the
    ``createRuntime`` hook from the claim's CDI spec, run by the runtime on the node, programs the
    simulated port (the node's sysfs marks its FME as simulated) before the container starts: the
    container's first read of the port's afu_id is the requested AFU, and the node's sysfs says so."""
    node = drivers["fpga"].node
    hook = node.layout.opt_dir / CRI_HOOK_PATH.removeprefix("/opt/")
    assert hook.is_file(), f"the driver's init container did not install {CRI_HOOK_PATH} in the node's /opt"
    afu_id = node.layout.sys_dir / FPGA_PORT_AFU_ID.removeprefix("/sys/")
    assert afu_id.read_text().strip() == NLB0_AFU, "the port must start on NLB0"
    bitstream = install_simulated_gbs(
        node.layout.srv_dir.parent, ARRIA10_INTERFACE, NLB3_AFU, simulated_payload(NLB3_AFU)
    )
    template = claim_template("fpga-nlb3", FPGA)
    template["spec"]["spec"]["devices"]["config"] = [
        {
            "requests": ["device"],
            "opaque": {
                "driver": FPGA,
                "parameters": {"apiVersion": f"{FPGA}/v1alpha1", "kind": "FpgaConfig", "afuId": NLB3_AFU},
            },
        }
    ]
    name = "fpga-region"
    script = (
        f'echo "afu $(cat {FPGA_PORT_AFU_ID})"; env | grep "^FPGA_" | while read -r v; do echo "env $v"; done'
    )
    try:
        with created(client, _templates(template)):
            try:
                client.create(
                    PODS,
                    claim_pod(name, NODE, {"dev": "fpga-nlb3"}, script=f"{LIST_DEV}; {script}; sleep 3600"),
                )
                wait_phase(client, node, name, ("Running",))
                (claim,) = pod_claims(client, name)
                assert allocated_devices(claim) == [f"{NODE}/0000-14-00-0-region"]
                assert _extra_devices(node, name, baseline) == {"dfl-port.0"}, f"devices in {name}"
                lines = pod_log(node, "default", name).splitlines()
                assert f"afu {NLB3_AFU}" in lines, f"the container read another function first: {lines}"
                env = {line.removeprefix("env ") for line in lines if line.startswith("env ")}
                assert {f"FPGA_REGION_1={ARRIA10_INTERFACE}", f"FPGA_AFU_1={NLB3_AFU}"} <= env, env
                assert afu_id.read_text().strip() == NLB3_AFU, "the node's port does not run the function"
            finally:
                delete_pod_and_claims(client, node, name, DRIVERS)
    finally:
        afu_id.write_text(NLB0_AFU + "\n")
        bitstream.unlink()


# ----- 7. restarts and hot-plug leak nothing, for every kind ---------------------------------------

# Kind -> the class its claim asks for in the tests below; FPGA (region mode) also names the function
# its port already runs, so the hook finds it programmed.
HELD = {
    "dsa": "wq-user-dedicated.dsa.intel.com",
    "iaa": "wq-user-dedicated.iaa.intel.com",
    "sgx": "enclave.sgx.intel.com",
    "dlb": "pf.dlb.intel.com",
    "npu": "accel.npu.intel.com",
    "qat": "cy.qat.intel.com",
    "fpga": FPGA,
}


def _held_template(kind: str, name: str, selectors: Sequence[str] = ()) -> JSON:
    template = claim_template(name, HELD[kind], selectors=selectors)
    if kind == "fpga":
        # The deprecated bare form, still accepted by the admission policy and the driver.
        template["spec"]["spec"]["devices"]["config"] = [
            {"requests": ["device"], "opaque": {"driver": FPGA, "parameters": {"afuId": NLB0_AFU}}}
        ]
    return template


def _create_pods(client: KubeClient, pods: Mapping[str, str], templates: Mapping[str, str]) -> None:
    """Pod ``pods[kind]`` with one claim from template ``templates[kind]``, for every kind at once."""
    for kind, name in pods.items():
        client.create(PODS, claim_pod(name, NODE, {"dev": templates[kind]}))


def _running_claims(
    client: KubeClient, node: RealNode, pods: Mapping[str, str], timeout: float = 90
) -> dict[str, JSON]:
    """Kind -> the claim of its pod, once every pod runs (the failure names the pod, thus the kind)."""
    claims = {}
    for kind, name in pods.items():
        wait_phase(client, node, name, ("Running",), timeout=timeout)
        (claims[kind],) = pod_claims(client, name)
    return claims


def _bound(client: KubeClient, name: str) -> bool:
    return bool(client.get(f"{PODS}/{name}")["spec"].get("nodeName") == NODE)


def _held(node: RealNode, claims: Mapping[str, JSON]) -> list[str]:
    """What is wrong with the claims' CDI spec and checkpoint entry (one each while a pod runs)."""
    problems = []
    for kind, claim in claims.items():
        held = leftovers(node.layout, KINDS[kind][0], [str(claim["metadata"]["uid"])])
        if len(held) != 2:
            problems.append(f"{kind}: the running pod's claim has {held or 'nothing'} on the node")
    return problems


def _left(node: RealNode, kinds: Sequence[str]) -> list[str]:
    return [f"{kind}: {item}" for kind in kinds for item in leftovers(node.layout, KINDS[kind][0])]


def _delete_all(client: KubeClient, node: RealNode, pods: Mapping[str, str]) -> None:
    """Delete every pod; each pod's wait names what its claim left, the first failure is raised
    after all pods were deleted."""
    failures = []
    for name in pods.values():
        try:
            delete_pod_and_claims(client, node, name, DRIVERS)
        except AssertionError as error:
            failures.append(str(error))
    assert not failures, "\n".join(failures)


def test_every_driver_killed_during_prepare_and_restarted_after_it_leaks_nothing(
    drivers: dict[str, DraDriver], client: KubeClient
) -> None:
    """Every driver is frozen (SIGSTOP) before a pod with a claim of its kind is created, so the
    kubelet's NodePrepareResources waits on it; then each is killed (SIGKILL, as a crash) and its
    container restarted. The kubelet tries again at its next sync (10 s on this node) and every pod
    runs. Then every driver's pod is deleted after prepare: the new instances keep each claim's CDI
    spec and checkpoint entry and publish again, and once the pods are gone nothing is left."""
    node = drivers["dsa"].node
    pods = {kind: f"crash-{kind}" for kind in HELD}
    templates = {kind: f"held-{kind}" for kind in HELD}
    with created(client, _templates(*(_held_template(k, t) for k, t in templates.items()))):
        try:
            frozen = {kind: drivers[kind].process_ids() for kind in HELD}
            assert all(frozen.values()), f"no driver process for {[k for k, p in frozen.items() if not p]}"
            connections = {kind: driver_connections(node, KINDS[kind][0]) for kind in HELD}
            try:
                for pids in frozen.values():
                    for pid in pids:
                        os.kill(pid, signal.SIGSTOP)
                _create_pods(client, pods, templates)
                for name in pods.values():
                    wait_claim_allocated(client, "default", name, "dev")
                    wait_for(
                        f"pod {name} bound to the node",
                        partial(_bound, client, name),
                        timeout=30,
                    )
                time.sleep(
                    2
                )  # the kubelet starts the pods within a fraction of that, and waits on the drivers
                phases = {
                    kind: client.get(f"{PODS}/{name}")["status"]["phase"] for kind, name in pods.items()
                }
                assert set(phases.values()) == {"Pending"}, f"pods ran with their driver frozen: {phases}"
            finally:
                for pids in frozen.values():
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
            claims = _running_claims(client, node, pods, timeout=150)
            problems = []
            for kind, name in pods.items():
                reasons = {e.get("reason") for e in events(client, "default", name)}
                if "FailedPrepareDynamicResources" not in reasons:
                    problems.append(
                        f"{kind}: the kubelet's prepare never failed; the driver was not killed during it"
                    )
                drivers[kind].wait_ready(client, connections_before=connections[kind])
                if set(frozen[kind]) & set(drivers[kind].process_ids()):
                    problems.append(f"{kind}: the killed driver process is still there")
            problems += _held(node, claims)
            assert not problems, "\n".join(problems)

            restarted = {}
            for kind in HELD:
                before = driver_connections(node, KINDS[kind][0])
                restarted[kind] = (drivers[kind].restart(client, wait=False), before)
            for kind, (old, before) in restarted.items():
                drivers[kind].wait_replaced(client, old, before)
            problems = [f"after restarting the driver, {p}" for p in _held(node, claims)]
            assert not problems, "\n".join(problems)
            for kind in HELD:
                drivers[kind].wait_published(client, KINDS[kind][1])
            phases = {kind: client.get(f"{PODS}/{name}")["status"]["phase"] for kind, name in pods.items()}
            assert set(phases.values()) == {"Running"}, f"pods after the drivers' restart: {phases}"
        finally:
            _delete_all(client, node, pods)
    left = _left(node, list(HELD))
    assert not left, f"left after the pods: {left}"


def test_kubelet_restart_keeps_every_kinds_pod_and_every_driver_publishes_again(
    drivers: dict[str, DraDriver], client: KubeClient
) -> None:
    """Pods hold a claim of every kind while the kubelet restarts: the pods keep running with their
    devices, the kubelet's start deletes the node's slices and every driver, registered again,
    publishes its own again; once the pods are gone nothing of their claims is left and every
    driver serves a new pod."""
    node = drivers["dsa"].node
    pods = {kind: f"kubelet-{kind}" for kind in HELD}
    again = {kind: f"after-{kind}" for kind in HELD}
    templates = {kind: f"held-{kind}" for kind in HELD}
    with created(client, _templates(*(_held_template(k, t) for k, t in templates.items()))):
        try:
            _create_pods(client, pods, templates)
            claims = _running_claims(client, node, pods)
            problems = _held(node, claims)
            assert not problems, "\n".join(problems)
            before = {
                kind: {s["metadata"]["uid"] for s in node_slices(client, NODE, KINDS[kind][0])}
                for kind in HELD
            }
            counts = {kind: driver_connections(node, KINDS[kind][0]) for kind in HELD}
            node.restart_kubelet()
            for kind in HELD:
                drivers[kind].wait_ready(client, connections_before=counts[kind])

            def stale() -> list[str]:
                """The kinds whose slices are not yet the driver's new ones with every device."""
                found = []
                for kind, (driver, devices) in KINDS.items():
                    fresh = {s["metadata"]["uid"] for s in node_slices(client, NODE, driver)}
                    if (
                        not fresh
                        or fresh & before[kind]
                        or set(published_devices(client, NODE, driver)) != devices
                    ):
                        found.append(kind)
                return found

            try:
                wait_for(
                    "every driver's slices deleted by the kubelet and published again",
                    lambda: not stale(),
                    timeout=90,
                )
            except TimeoutError as error:
                raise AssertionError(f"{error}: not republished: {stale()}") from None
            for kind, name in pods.items():
                pod = client.get(f"{PODS}/{name}")
                assert pod["status"]["phase"] == "Running", f"{kind}: {pod['status']}"
                assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, f"{kind}: {pod['status']}"
            problems = [f"after the kubelet's restart, {p}" for p in _held(node, claims)]
            assert not problems, "\n".join(problems)
        finally:
            _delete_all(client, node, pods)
        left = _left(node, list(HELD))
        assert not left, f"left after the pods: {left}"
        try:
            _create_pods(client, again, templates)
            served = _running_claims(client, node, again)
            wrong = {
                kind: allocated_devices(claim)
                for kind, claim in served.items()
                if [d.removeprefix(f"{NODE}/") for d in allocated_devices(claim)]
                not in ([device] for device in KINDS[kind][1])
            }
            assert not wrong, f"claims after the restart got {wrong}"
        finally:
            _delete_all(client, node, again)


def test_hot_plugged_devices_are_published_served_and_withdrawn_under_their_pods(
    drivers: dict[str, DraDriver], client: KubeClient, baseline: set[str]
) -> None:
    """One device of every kind that can be hot-plugged (``HOT_PLUG``: all but SGX) is plugged into
    the node: each driver publishes it, and a claim selecting it by PCI address gets exactly its
    device nodes. Unplugged under the running pods, each leaves its driver's slices; the pods keep
    running, and deleting them leaves nothing of their claims."""
    node = drivers["dsa"].node
    plugged = hot_plug(node, sorted(HOT_PLUG))
    present = {p.kind: p for p in plugged}
    pods = {p.kind: f"hot-{p.kind}" for p in plugged}
    try:
        for p in plugged:
            drivers[p.kind].wait_published(client, KINDS[p.kind][1] | {p.device}, timeout=60)
        selected = {
            p.kind: _held_template(
                p.kind,
                pods[p.kind],
                [f'device.attributes["resource.kubernetes.io"].pciBusID == "{p.address}"'],
            )
            for p in plugged
        }
        with created(client, _templates(*selected.values())):
            try:
                _create_pods(client, pods, pods)
                claims = _running_claims(client, node, pods)
                problems = []
                for p in plugged:
                    if allocated_devices(claims[p.kind]) != [f"{NODE}/{p.device}"]:
                        problems.append(
                            f"{p.kind}: the claim got {allocated_devices(claims[p.kind])}, not {p.device}"
                        )
                    extra = _extra_devices(node, pods[p.kind], baseline)
                    if extra != p.paths:
                        problems.append(f"{p.kind}: the pod got {sorted(extra)}, not {sorted(p.paths)}")
                assert not problems, "\n".join(problems)
                for p in plugged:
                    p.unplug()
                    del present[p.kind]
                for p in plugged:
                    drivers[p.kind].wait_published(client, KINDS[p.kind][1], timeout=60)
                phases = {
                    kind: client.get(f"{PODS}/{name}")["status"]["phase"] for kind, name in pods.items()
                }
                assert set(phases.values()) == {"Running"}, f"pods after their devices left: {phases}"
            finally:
                _delete_all(client, node, pods)
    finally:
        for p in present.values():
            p.unplug()
    for kind in pods:
        drivers[kind].wait_published(client, KINDS[kind][1], timeout=60)


# ----- 8. QAT in kernel mode (runs last: it replaces the DPDK-mode QAT driver) ----------------------

# The node's c6xx device in the simulator's default configuration: [SSL] (cy1_dc0, 4 processes,
# unpinned) and [DC] (cy0_dc1, 2 processes, pinned to the device).
KERNEL_SLOTS = {
    "cy1_dc0": ("SSL", {f"ssl-dev0-{n}" for n in range(4)}),
    "cy0_dc1": ("DC", {f"dc-dev0-{n}" for n in range(2)}),
}
# What every slot's claim gets: the QAT driver's common nodes and the device's uio node.
KERNEL_NODES = {"qat_adf_ctl", "qat_dev_processes", "usdm_drv", "uio0"}


def _section_env(node: RealNode, name: str) -> set[str]:
    lines = pod_log(node, "default", name).splitlines()
    return {line.removeprefix("env ") for line in lines if line.startswith("env QAT")}


def test_qat_kernel_mode_serves_section_slots_by_claim_and_by_extended_resource(
    drivers: dict[str, DraDriver],
    client: KubeClient,
    baseline: set[str],
    node_control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    """``deploy/dra/qat/kernel`` replaces the DPDK-mode driver (both are ``qat.intel.com``): it reads
    the node's adf_ctl and /etc and publishes each process slot. A claim of the kernel-mode class
    ``cy1-dc0.qat.intel.com`` gets exactly that section's environment and the driver's device
    nodes; a pod asking ``qat.intel.com/cy0_dc1: 1`` with no claim is served by DRA through the
    class of that name, with its own section's environment."""
    dpdk = drivers["qat"]
    node = dpdk.node
    dpdk.uninstall(client)
    wait_for(
        "the DPDK-mode QAT driver's slices withdrawn", lambda: not node_slices(client, NODE, QAT), timeout=60
    )
    kernel = install_dra_driver(node_control_plane, node, "qat/kernel", tmp_path)
    script = f"{LIST_DEV}; {PRINT_QAT}; sleep 3600"
    try:
        assert kernel.driver == QAT
        published = kernel.wait_published(client, set().union(*(slots for _, slots in KERNEL_SLOTS.values())))
        assert published["ssl-dev0-0"]["attributes"]["resource"]["string"] == "cy1_dc0", published[
            "ssl-dev0-0"
        ]
        with created(client, _templates(claim_template("qat-ssl", "cy1-dc0.qat.intel.com"))):
            client.create(PODS, claim_pod("kernel-claim", NODE, {"dev": "qat-ssl"}, script=script))
            client.create(
                PODS, claim_pod("kernel-ext", NODE, {}, limits={"qat.intel.com/cy0_dc1": "1"}, script=script)
            )
            for name, resource in (("kernel-claim", "cy1_dc0"), ("kernel-ext", "cy0_dc1")):
                pod = wait_phase(client, node, name, ("Running",))
                (claim,) = pod_claims(client, name)
                section, slots = KERNEL_SLOTS[resource]
                (device,) = allocated_devices(claim)
                assert device.removeprefix(f"{NODE}/") in slots, (
                    f"{name}: {device} is not a slot of {section}"
                )
                assert _extra_devices(node, name, baseline) == KERNEL_NODES, f"devices in {name}"
                env = _section_env(node, name)
                assert env == {f"QAT_SECTION_NAME={section}", f"QAT_SECTION_NAME_{resource}_0={section}"}, (
                    f"QAT environment of {name}"
                )
                if name == "kernel-ext":
                    status = pod["status"].get("extendedResourceClaimStatus") or {}
                    assert status.get("resourceClaimName") == claim["metadata"]["name"], pod["status"]
    finally:
        try:
            _delete_all(client, node, {"claim": "kernel-claim", "ext": "kernel-ext"})
        finally:
            kernel.uninstall(client)
