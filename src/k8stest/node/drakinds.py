"""The DRA drivers of the kinds other than GPU on one real node: the node they run on and what a
test reads of a pod that holds claims of several drivers.

Nothing here is specific to one test module: the end-to-end tests
(tests/node/test_real_node_dra_kinds.py) and the benchmark (bench/bench_dra_kinds_node.py) share
the node description, the pod builder and the waits, whose failures name what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from intel_device_plugins.dra.placement import pci_device_name
from intel_device_plugins.sim import dlb, fpga, idxd, npu, qat
from intel_device_plugins.sim.fakefs import FakeTree
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node.dra import claim_path, events, leftovers, pod_claim_names
from k8stest.node.pods import pod_log, workload_pod
from k8stest.node.running import RealNode

__all__ = [
    "HOT_PLUG",
    "KINDS_NODE_NAME",
    "KINDS_NODE_PROFILE",
    "LIST_DEV",
    "PODS",
    "HotPlugged",
    "claim_pod",
    "delete_pod_and_claims",
    "dev_lines",
    "gone",
    "hot_plug",
    "pod_claims",
    "pod_devices",
    "wait_phase",
]

PODS = "/api/v1/namespaces/default/pods"

# One node with a device of each kind the tests cover, chosen so that scheduling decides something:
# DSA has exactly one dedicated and one shared user queue (``mixed``: wq0.0 dedicated, wq0.1
# shared), SGX a small EPC (64 MiB on the node's one NUMA node) that three 24 MiB claims exceed;
# IAA one dedicated queue; the FPGA is an Arria 10 whose one port runs NLB0 (the simulator's defaults).
# The DPDK-mode QAT driver publishes the two VFs and nothing of the kernel-mode device.
KINDS_NODE_NAME = "k8stest-dra-kinds-node"
KINDS_NODE_PROFILE = f"""
[node]
name = "{KINDS_NODE_NAME}"
[[dsa]]
count = 1
wqs = 2
wq_mode = "mixed"
[[sgx]]
epc_bytes_per_node = {64 << 20}
[[dlb]]
count = 1
[[npu]]
count = 1
[[qat]]
count = 1
vfs = 2
[[fpga]]
count = 1
[[iaa]]
count = 1
wqs = 1
# Last, so that the devices above keep their PCI addresses: one c6xx device for QAT's kernel mode
# (the simulator's default configuration: [SSL] 4 unpinned processes of cy1_dc0, [DC] 2 pinned ones
# of cy0_dc1), its adf_ctl in /usr/local/bin and its c6xx_dev0.conf in /etc of the node.
[[qat_kernel]]
count = 1
"""

# Every script prints the character devices the container sees under /dev, one ``dev <path>`` line
# each (path relative to /dev); what a pod without claims sees is subtracted by the tests.
LIST_DEV = 'find /dev -type c | while read -r f; do echo "dev ${f#/dev/}"; done; true'


def dev_lines(log: str) -> set[str]:
    """The device paths a pod's :data:`LIST_DEV` printed."""
    return {line.split(maxsplit=1)[1] for line in log.splitlines() if line.startswith("dev ")}


def pod_devices(node: RealNode, name: str) -> set[str]:
    """What a running pod's :data:`LIST_DEV` printed, once its log has it."""
    wait_for(f"pod {name}'s device list", lambda: "dev " in pod_log(node, "default", name), timeout=30)
    return dev_lines(pod_log(node, "default", name))


def claim_pod(
    name: str,
    node_name: str,
    templates: Mapping[str, str],
    *,
    limits: Mapping[str, str] | None = None,
    script: str = f"{LIST_DEV}; sleep 3600",
) -> JSON:
    """A long-running pod with a claim per entry of ``templates`` (claim name in the pod ->
    ResourceClaimTemplate name) and the extended resources ``limits``, all given to its container."""
    pod = workload_pod(name, node_name, script, limits=limits)
    spec = dict(pod["spec"])
    container = dict(spec["containers"][0])
    if templates:
        resources = dict(container.get("resources", {}))
        resources["claims"] = [{"name": n} for n in templates]
        container["resources"] = resources
        spec["resourceClaims"] = [{"name": n, "resourceClaimTemplateName": t} for n, t in templates.items()]
    spec["containers"] = [container]
    return {**pod, "spec": spec}


def gone(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
    except ApiError as e:
        if e.status == 404:
            return True
        raise
    return False


def pod_claims(client: KubeClient, name: str) -> list[JSON]:
    """The ResourceClaims generated for pod ``name``: one per template claim, and the one the
    scheduler made for its extended resources; none when the pod is gone."""
    try:
        pod = client.get(f"{PODS}/{name}")
    except ApiError as e:
        if e.status == 404:
            return []
        raise
    names = list(pod_claim_names(pod).values())
    extended = pod.get("status", {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        names.append(str(extended["resourceClaimName"]))
    found = []
    for claim in names:
        try:
            found.append(client.get(claim_path("default", claim)))
        except ApiError as e:
            if e.status != 404:
                raise
    return found


def wait_phase(
    client: KubeClient, node: RealNode, name: str, phases: Sequence[str], timeout: float = 90
) -> JSON:
    """Pod ``name`` once its phase is one of ``phases``; the failure shows its conditions,
    container states and events."""

    def reached() -> JSON | None:
        node.check_alive()
        pod = client.get(f"{PODS}/{name}")
        return pod if pod.get("status", {}).get("phase") in phases else None

    try:
        return wait_for(f"pod {name} {'/'.join(phases)}", reached, timeout=timeout)
    except TimeoutError as error:
        pod = client.get(f"{PODS}/{name}")
        status = pod.get("status", {})
        seen = [f"{e.get('reason')}: {e.get('message')}" for e in events(client, "default", name)]
        raise AssertionError(
            f"{error}: phase {status.get('phase')}, conditions {status.get('conditions')},"
            f" containers {status.get('containerStatuses')}, events {seen}"
        ) from None


def delete_pod_and_claims(client: KubeClient, node: RealNode, name: str, drivers: Sequence[str]) -> None:
    """Delete pod ``name``; wait until it and its generated claims are gone and none of ``drivers``
    holds anything more of those claims (CDI spec, checkpoint entry); the failure names what is left."""
    claims = pod_claims(client, name)
    client.delete_if_present(f"{PODS}/{name}")
    wait_for(f"pod {name} deleted", lambda: gone(client, f"{PODS}/{name}"), timeout=60)
    uids = [str(c["metadata"]["uid"]) for c in claims]
    for claim in claims:
        claim_name = claim["metadata"]["name"]
        wait_for(
            f"claim {claim_name} deleted",
            partial(gone, client, claim_path("default", claim_name)),
            timeout=60,
        )

    def left() -> list[str]:
        return [item for driver in drivers for item in leftovers(node.layout, driver, uids)] if uids else []

    try:
        wait_for(f"nothing of pod {name}'s claims left", lambda: not left(), timeout=30)
    except TimeoutError as error:
        raise AssertionError(f"{error}: {left()}") from None


# ----- hot-plug ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HotPlugged:
    """A device plugged into a running node: the name its driver publishes it under, its PCI address
    (a claim selects it by ``resource.kubernetes.io/pciBusID``), the device nodes a container holding
    it gets (below /dev, udev's ``char/`` link counted as ``char``), and how it leaves again."""

    kind: str
    device: str
    address: str
    paths: frozenset[str]
    unplug: Callable[[], None]


def _plug_queue(tree: FakeTree, kind: str, prefix: str) -> HotPlugged:
    accelerator = idxd.add_accelerator(tree, prefix)
    queue = idxd.add_work_queue(tree, accelerator, prefix, 0, mode="dedicated")
    return HotPlugged(
        kind,
        pci_device_name(accelerator.address, f"wq{queue.rsplit('.', 1)[1]}"),
        accelerator.address,
        frozenset({f"{prefix}/{queue}", "char"}),
        partial(idxd.remove_accelerator, tree, accelerator, prefix),
    )


def _plug_dlb(tree: FakeTree) -> HotPlugged:
    device = dlb.add_dlb(tree)
    return HotPlugged(
        "dlb",
        pci_device_name(device.address),
        device.address,
        frozenset({device.name}),
        partial(dlb.remove_dlb, tree, device.name),
    )


def _plug_npu(tree: FakeTree) -> HotPlugged:
    device = npu.add_npu(tree)
    return HotPlugged(
        "npu",
        pci_device_name(device.address),
        device.address,
        frozenset({f"accel/{device.name}"}),
        partial(npu.remove_npu, tree, device.name),
    )


def _plug_qat(tree: FakeTree) -> HotPlugged:
    pf = qat.add_pf(tree, vfs=1)
    (vf,) = pf.vfs
    group = qat.vfio_node_name(tree, tree.sysfs_of(vf))
    name = "qatvf-" + pci_device_name(vf)
    return HotPlugged(
        "qat", name, vf, frozenset({f"vfio/{group}", "vfio/vfio"}), partial(qat.remove_pf, tree, pf)
    )


def _plug_fpga(tree: FakeTree) -> HotPlugged:
    """A card whose one port runs the node's other card's function (NLB0): region mode publishes
    its FME, and a claim naming NLB0 finds it already programmed."""
    card = fpga.add_fpga(tree)
    (port,) = card.ports
    return HotPlugged(
        "fpga",
        pci_device_name(card.address, "region"),
        card.address,
        frozenset({port.name}),
        partial(fpga.remove_fpga, tree, card),
    )


HOT_PLUG: Mapping[str, Callable[[FakeTree], HotPlugged]] = {
    "dsa": partial(_plug_queue, kind="dsa", prefix="dsa"),
    "iaa": partial(_plug_queue, kind="iaa", prefix="iax"),
    "dlb": _plug_dlb,
    "npu": _plug_npu,
    "qat": _plug_qat,
    "fpga": _plug_fpga,
}
"""Kind -> how one more device of it is hot-plugged into a node's trees (``FakeTree`` rooted at the
node's work directory). SGX has none: its EPC and its two misc devices belong to the CPU and the
in-kernel driver, not to a slot."""


def hot_plug(node: RealNode, kinds: Sequence[str]) -> list[HotPlugged]:
    """Plug one device of each of ``kinds`` into ``node``, its device nodes made character devices
    as the kernel makes them (each appears whole, with its udev link)."""
    tree = FakeTree(node.workdir)
    plugged: list[HotPlugged] = []
    try:
        for kind in kinds:
            plugged.append(HOT_PLUG[kind](tree))
        node.realize_device_nodes()
    except BaseException:
        for device in plugged:
            device.unplug()
        raise
    return plugged
