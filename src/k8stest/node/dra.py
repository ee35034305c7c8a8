"""Dynamic Resource Allocation on the real node: the API objects tests create by hand, the pod's
generated claims and events, and which DRA feature gates each component runs with.

The builders are pure and return what the API server takes (``resource.k8s.io/v1``); the rest are
thin readers over :class:`k8stest.kubeclient.KubeClient`. Nothing here knows a device kind: the
harness test (tests/node/test_real_node_dra.py) publishes a fake device with no driver behind it,
the GPU driver's tests publish nothing and read what the driver did.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from intel_device_plugins.dra import checkpoint
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, KubeClient, wait_for
from k8stest.node.config import NodeLayout

__all__ = [
    "DRA_FEATURE_GATES",
    "DRA_NODE_CARDS",
    "DRA_NODE_DEVICES",
    "DRA_NODE_NAME",
    "DRA_NODE_PROFILE",
    "KUBELET_DRA_FEATURE_GATES",
    "RESOURCE_API",
    "allocated_devices",
    "card_of",
    "checkpoint_claims",
    "claim_cdi_files",
    "claim_path",
    "claim_template",
    "component_feature_gates",
    "created",
    "device_class",
    "device_health",
    "device_of",
    "drm_nodes",
    "enabled_feature_gates",
    "events",
    "leftovers",
    "node_slices",
    "pod_claim_names",
    "published_devices",
    "resource_slice",
    "wait_claim_allocated",
    "wait_event",
    "with_claims",
]

RESOURCE_API = "/apis/resource.k8s.io/v1"

# A node for the GPU DRA driver's end-to-end tests and benchmark: its GPUs differ the way claims'
# selectors tell them apart (kernel driver, PCI device ID, local memory), and it has nothing else.
DRA_NODE_NAME = "k8stest-dra-node"
DRA_NODE_PROFILE = f"""
[node]
name = "{DRA_NODE_NAME}"
# card0, card1: Arc A770, 16 GiB
[[gpu]]
driver = "i915"
count = 2
device_id = "0x56a0"
memory_bytes = {16 << 30}
# card2: Arc A380, 6 GiB
[[gpu]]
driver = "i915"
count = 1
device_id = "0x56a5"
memory_bytes = {6 << 30}
# card3: Arc B580 on xe, 12 GiB
[[gpu]]
driver = "xe"
count = 1
device_id = "0xe20b"
memory_bytes = {12 << 30}
# card4: no local memory, as an integrated GPU
[[gpu]]
driver = "i915"
count = 1
device_id = "0x4680"
"""
DRA_NODE_CARDS = ("card0", "card1", "card2", "card3", "card4")
DRA_NODE_DEVICES = (
    "0000-10-00-0-0x56a0",
    "0000-11-00-0-0x56a0",
    "0000-12-00-0-0x56a5",
    "0000-13-00-0-0xe20b",
    "0000-14-00-0-0x4680",
)
"""The same cards by their DRA device names (PCI address, device ID): the simulator gives a fresh
node's functions buses 0x10, 0x11, … in card order."""

# The DRA features the project's drivers use, each on by default in Kubernetes 1.37
# (k8s.io/kubernetes@v1.37.2 pkg/features/kube_features.go): DynamicResourceAllocation GA,
# DRAConsumableCapacity and DRAPartitionableDevices beta, DRAExtendedResource, DRADeviceTaints and
# DRADeviceTaintRules GA, ResourceHealthStatus beta. The control plane and the kubelet therefore
# run with their defaults; the harness test reads each component's gates so that a release that
# turns one off fails there and not in a driver test.
DRA_FEATURE_GATES = (
    "DynamicResourceAllocation",
    "DRAConsumableCapacity",
    "DRAPartitionableDevices",
    "DRAExtendedResource",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
)
# Only the kubelet reads this one (health in the pod's status through NodeWatchResources).
KUBELET_DRA_FEATURE_GATES = (*DRA_FEATURE_GATES, "ResourceHealthStatus")

_FEATURE_LINE = re.compile(r'^kubernetes_feature_enabled\{name="([^"]+)",stage="[^"]*"\} (\d+(?:\.\d+)?)$')


def enabled_feature_gates(metrics: str) -> dict[str, bool]:
    """Gate name -> enabled, from a component's Prometheus text (``kubernetes_feature_enabled``)."""
    gates = {}
    for line in metrics.splitlines():
        match = _FEATURE_LINE.match(line.strip())
        if match:
            gates[match.group(1)] = float(match.group(2)) == 1.0
    return gates


def _metrics_over_tls(port: int) -> str:
    """GET https://127.0.0.1:<port>/metrics of the scheduler or KCM. Their serving certificates are
    self-signed at start and ``/metrics`` is an always-allowed path (controlplane.py), so this
    loopback read verifies no certificate and sends no credentials."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as resp:
        return str(resp.read(8 << 20).decode())


def component_feature_gates(
    cp: ControlPlane, client: KubeClient, node_name: str
) -> dict[str, dict[str, bool]]:
    """Each component's feature gates as it reports them: kube-apiserver, kube-scheduler,
    kube-controller-manager, and the kubelet of ``node_name`` (through the API server's node proxy)."""
    return {
        "kube-apiserver": enabled_feature_gates(str(client.get("/metrics")["text"])),
        "kube-scheduler": enabled_feature_gates(_metrics_over_tls(cp.ports.scheduler)),
        "kube-controller-manager": enabled_feature_gates(_metrics_over_tls(cp.ports.controller_manager)),
        "kubelet": enabled_feature_gates(str(client.get(f"/api/v1/nodes/{node_name}/proxy/metrics")["text"])),
    }


def resource_slice(
    name: str, driver: str, node_name: str, devices: Sequence[Mapping[str, Any]], *, generation: int = 1
) -> JSON:
    """A ResourceSlice of one pool named after the node, as a driver on that node publishes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [dict(d) for d in devices],
        },
    }


def device_class(name: str, driver: str, *, extended_resource_name: str = "") -> JSON:
    """A DeviceClass selecting every device of ``driver``."""
    spec: JSON = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim_template(
    name: str,
    class_name: str,
    *,
    request: str = "device",
    selectors: Sequence[str] = (),
    capacity: Mapping[str, str] | None = None,
    count: int = 1,
) -> JSON:
    """A ResourceClaimTemplate asking for ``count`` devices of ``class_name`` in one request;
    ``selectors`` are CEL expressions, ``capacity`` what the claim consumes of a shared device."""
    exactly: JSON = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}}},
    }


def with_claims(pod: Mapping[str, Any], templates: Mapping[str, str]) -> JSON:
    """``pod`` (one container) with a claim per entry of ``templates`` (claim name in the pod ->
    ResourceClaimTemplate name), each given to the container."""
    spec = dict(pod["spec"])
    container = dict(spec["containers"][0])
    resources = dict(container.get("resources", {}))
    resources["claims"] = [{"name": n} for n in templates]
    container["resources"] = resources
    spec["containers"] = [container, *spec["containers"][1:]]
    spec["resourceClaims"] = [{"name": n, "resourceClaimTemplateName": t} for n, t in templates.items()]
    return {**pod, "spec": spec}


def claim_path(namespace: str, name: str = "") -> str:
    base = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims"
    return f"{base}/{name}" if name else base


def pod_claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Claim name in the pod -> the ResourceClaim that KCM generated for it (once it did)."""
    return {
        s["name"]: s["resourceClaimName"]
        for s in pod.get("status", {}).get("resourceClaimStatuses", [])
        if s.get("resourceClaimName")
    }


def wait_claim_allocated(
    client: KubeClient, namespace: str, pod_name: str, claim: str, timeout: float = 60
) -> JSON:
    """The ResourceClaim generated for the pod's ``claim`` once the scheduler allocated it; the
    failure says whether the claim was never generated or never allocated, and the pod's state."""
    pods = f"/api/v1/namespaces/{namespace}/pods/{pod_name}"

    def allocated() -> JSON | None:
        name = pod_claim_names(client.get(pods)).get(claim)
        if not name:
            return None
        obj = client.get(claim_path(namespace, name))
        return obj if obj.get("status", {}).get("allocation") else None

    try:
        return wait_for(f"claim {claim} of pod {namespace}/{pod_name} allocated", allocated, timeout=timeout)
    except TimeoutError as error:
        pod = client.get(pods)
        name = pod_claim_names(pod).get(claim)
        state = (
            f"generated as {name}, not allocated"
            if name
            else "not generated (KCM's resourceclaim-controller)"
        )
        conditions = pod.get("status", {}).get("conditions", [])
        raise AssertionError(f"{error}: {state}; pod conditions {conditions}") from None


def events(client: KubeClient, namespace: str, name: str) -> list[JSON]:
    """The events about object ``name`` in ``namespace``, oldest first."""
    found = client.get(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector={quote(f'involvedObject.name={name}')}"
    )
    return sorted(found["items"], key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def wait_event(client: KubeClient, namespace: str, name: str, reason: str, timeout: float = 60) -> JSON:
    """The first event with ``reason`` about ``name``; the failure lists the events there were."""
    try:
        return wait_for(
            f"a {reason} event about {namespace}/{name}",
            lambda: next((e for e in events(client, namespace, name) if e.get("reason") == reason), None),
            timeout=timeout,
        )
    except TimeoutError as error:
        seen = [f"{e.get('reason')}: {e.get('message')}" for e in events(client, namespace, name)]
        raise AssertionError(f"{error}; events: {seen}") from None


def _collection(obj: Mapping[str, Any]) -> str:
    kind = str(obj["kind"])
    plural = {"ResourceSlice": "resourceslices", "DeviceClass": "deviceclasses"}.get(kind)
    if plural:
        return f"{RESOURCE_API}/{plural}"
    if kind == "ResourceClaimTemplate":
        namespace = obj["metadata"].get("namespace", "default")
        return f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"
    raise ValueError(f"created(): no collection known for kind {kind!r}")


@contextmanager
def created(client: KubeClient, objects: Sequence[Mapping[str, Any]]) -> Iterator[list[JSON]]:
    """Create ``objects`` (ResourceSlices, DeviceClasses, ResourceClaimTemplates) in order; delete
    them in reverse order afterwards, also when the test failed. Yields what the API server returned."""
    made: list[tuple[str, JSON]] = []
    try:
        for obj in objects:
            collection = _collection(obj)
            made.append((collection, client.create(collection, obj)))
        yield [obj for _, obj in made]
    finally:
        for collection, obj in reversed(made):
            client.delete_if_present(f"{collection}/{obj['metadata']['name']}")


# ----- what a driver left on the node and in the API ------------------------------------------


def node_slices(client: KubeClient, node_name: str, driver: str) -> list[JSON]:
    """The ResourceSlices of ``driver`` for ``node_name`` (API field selectors, so others' are not read)."""
    selector = quote(f"spec.nodeName={node_name},spec.driver={driver}")
    return list(client.get(f"{RESOURCE_API}/resourceslices?fieldSelector={selector}")["items"])


def published_devices(client: KubeClient, node_name: str, driver: str) -> dict[str, JSON]:
    """Device name -> device as ``driver`` publishes it for ``node_name``: the slices of the
    pool's newest generation only (older ones are being replaced, the scheduler ignores them)."""
    slices = node_slices(client, node_name, driver)
    newest = max((s["spec"]["pool"]["generation"] for s in slices), default=0)
    return {
        d["name"]: d
        for s in slices
        if s["spec"]["pool"]["generation"] == newest
        for d in s["spec"].get("devices", [])
    }


def allocated_devices(claim: Mapping[str, Any]) -> list[str]:
    """The devices (``<pool>/<device>``) allocated to a claim, in result order."""
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [f"{r['pool']}/{r['device']}" for r in results]


def claim_cdi_files(cdi_dir: Path, driver: str) -> list[str]:
    """The files of ``driver``'s per-claim CDI kind in a node's CDI directory (host side), whatever
    their extension (the specs are JSON; a temporary file left behind counts too)."""
    return sorted(p.name for p in cdi_dir.glob(f"k8s.{driver}-claim_*"))


def checkpoint_claims(plugins_dir: Path, driver: str) -> set[str]:
    """The claim UIDs in ``driver``'s checkpoint (``<plugins dir>/<driver>/checkpoint.json``, read
    with the framework's decoder); none when the file does not exist."""
    path = plugins_dir / driver / checkpoint.FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    return set(checkpoint.decode(data, str(path), driver))


def leftovers(node_layout: NodeLayout, driver: str, claim_uids: Sequence[str] = ()) -> list[str]:
    """What ``driver`` still holds on the node for ``claim_uids`` (every claim when empty): CDI spec
    files and checkpoint entries, each named."""
    found = []
    for name in claim_cdi_files(node_layout.cdi_run_dir, driver):
        uid = name.removeprefix(f"k8s.{driver}-claim_").split(".", 1)[0]
        if not claim_uids or uid in claim_uids:
            found.append(f"CDI spec {node_layout.cdi_run_dir / name}")
    for uid in sorted(checkpoint_claims(node_layout.plugins_dir, driver)):
        if not claim_uids or uid in claim_uids:
            found.append(
                f"checkpoint entry {uid} in {node_layout.plugins_dir / driver / checkpoint.FILE_NAME}"
            )
    return found


def device_health(pod: Mapping[str, Any]) -> dict[str, JSON]:
    """Resource ID -> ``{"health": ..., "message": ...}`` as the kubelet reports it in the pod's
    container statuses (``allocatedResourcesStatus``, ResourceHealthStatus). The kubelet names a
    DRA device by its first CDI device ID, else ``<driver>/<pool>/<device>``."""
    health: dict[str, JSON] = {}
    for container in pod.get("status", {}).get("containerStatuses", []):
        for resource in container.get("allocatedResourcesStatus") or []:
            for item in resource.get("resources") or []:
                health[str(item["resourceID"])] = {
                    "health": str(item.get("health", "")),
                    "message": str(item.get("message", "")),
                }
    return health


_CARD = re.compile(r"^card[0-9]+$")


def card_of(node_layout: NodeLayout, device: str) -> str:
    """The DRM card (``cardN``) of a GPU DRA device name (``0000-03-00-0-0x56c0``, the PCI address with
    dashes and the device ID); a card name is itself. Raises ``LookupError`` naming the device."""
    if _CARD.match(device):
        return device
    domain, bus, slot, function = device.split("-")[:4]
    address = f"{domain}:{bus}:{slot}.{function}"
    drm = node_layout.sys_dir / "class" / "drm"
    for entry in sorted(drm.iterdir()):
        if _CARD.match(entry.name) and (entry / "device").resolve().name == address:
            return entry.name
    raise LookupError(f"no DRM card in {drm} is GPU device {device} (PCI {address})")


def device_of(node_layout: NodeLayout, card: str) -> str:
    """The GPU DRA device name of DRM card ``card``: its PCI address with dashes, then its device ID."""
    device_dir = (node_layout.sys_dir / "class" / "drm" / card / "device").resolve()
    pci_id = (device_dir / "device").read_text().strip()
    return f"{device_dir.name.replace(':', '-').replace('.', '-')}-{pci_id}"


def drm_nodes(node_layout: NodeLayout, card: str) -> set[str]:
    """The DRM device nodes of ``card`` (``cardN``, ``renderD<M>``, or its DRA device name): what the
    node's sysfs lists for the card and its /dev/dri holds (sysfs also lists minors no node exists
    for, ``controlD*``)."""
    card = card_of(node_layout, card)
    listed = (node_layout.sys_dir / "class" / "drm" / card / "device" / "drm").iterdir()
    return {p.name for p in listed if (node_layout.dev_dir / "dri" / p.name).exists()}
