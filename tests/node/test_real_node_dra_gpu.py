"""The GPU DRA driver (``intel_gpu_dra_driver`` from the node image) on a real node, end to end.

A node of its own (``k8stest-dra-node``) with a mixed set of simulated GPUs joins the session's
control plane; ``deploy/dra/gpu``, applied as a user applies it, runs the driver there, and no
device plugin serves that node. The scenarios of issue #20:

1. A claim from a template gets exactly its allocated card: the pod's /dev/dri holds that card's
   nodes and no other, delivered by containerd from the driver's per-claim CDI spec. CEL selectors
   on ``pciId``, ``driver`` and ``memory`` pick the right card.
2. Two pods share one card by capacity (memory); a third that would exceed the card stays Pending
   with the scheduler's reason, and runs once one of the two is gone.
3. A pod asking ``gpu.intel.com/i915: 1`` with no claim runs on the node, served by DRA through the
   DeviceClass's extended resource.
4. A card turns unhealthy (a device node vanishes): its slice carries the driver's taint, a new
   claim lands on another card, and the running pod's status shows the card Unhealthy.
5. Nothing leaks (CDI spec files, checkpoint entries, slices) when the driver restarts after
   prepare, is killed during it or rolls to a new pod, when the kubelet restarts, when a card is
   hot-plugged and unplugged, and when the node is deleted.

Every failure message names what is missing. Needs the node image from ``make images`` with the
driver in it (docs/node.md, "The GPU DRA driver on the real node").
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from intel_device_plugins.dra.prepare import spec_file_name
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node import (
    NodeBinaries,
    RealNode,
    make_char_device,
    pod_log,
    workload_pod,
)
from k8stest.node.dra import (
    DRA_NODE_DEVICES,
    DRA_NODE_NAME,
    DRA_NODE_PROFILE,
    allocated_devices,
    card_of,
    checkpoint_claims,
    claim_cdi_files,
    claim_path,
    claim_template,
    created,
    device_health,
    device_of,
    drm_nodes,
    events,
    leftovers,
    node_slices,
    pod_claim_names,
    published_devices,
    wait_claim_allocated,
    with_claims,
)
from k8stest.node.dradriver import DraDriver, driver_connections, install_dra_driver
from k8stest.node.fixtures import own_image_node
from k8stest.node.plugins import unschedulable_message

pytestmark = pytest.mark.k8s

PODS = "/api/v1/namespaces/default/pods"
NODE = DRA_NODE_NAME
DRIVER = "gpu.intel.com"
GIB = 1 << 30
CARDS = set(DRA_NODE_DEVICES)
# Every script lists the DRM device nodes the container got.
LIST_DRI = 'for f in /dev/dri/*; do [ -c "$f" ] && echo "dri ${f#/dev/dri/}"; done; true'


@pytest.fixture(scope="module")
def dra_node(
    node_binaries: NodeBinaries,
    node_control_plane: ControlPlane,
    node_images: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNode]:
    """A node of its own with ``DRA_NODE_PROFILE``'s GPUs and the project's node image; no device
    plugin runs there. The last test stops and deletes it; otherwise that happens here."""
    with own_image_node(
        node_binaries,
        node_control_plane,
        node_images,
        tmp_path_factory.mktemp("dra-node"),
        NODE,
        DRA_NODE_PROFILE,
        "DRA_NODE_PROFILE",
    ) as node:
        yield node


@pytest.fixture(scope="module")
def driver(
    dra_node: RealNode, node_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DraDriver]:
    """``deploy/dra/gpu`` applied for the DRA node, publishing every card."""
    installed = install_dra_driver(
        node_control_plane, dra_node, "gpu", tmp_path_factory.mktemp("dra-install")
    )
    client = node_control_plane.client()
    try:
        assert installed.driver == DRIVER
        installed.wait_published(client, CARDS)
        yield installed
        installed.uninstall(client)
    finally:
        client.close()


@dataclass(frozen=True)
class ClaimRun:
    """A pod with one claim from a template, seen Running."""

    pod: JSON
    claim: JSON
    dri: set[str]  # the DRM device nodes in its /dev/dri

    @property
    def cards(self) -> list[str]:
        return [d.rsplit("/", 1)[1] for d in allocated_devices(self.claim)]


_SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity(text: str) -> int:
    """A whole-number Kubernetes quantity (``4Gi``, ``17179869184``, ``1k``) as an int."""
    for suffix, factor in _SUFFIXES.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * factor
    return int(text)


def dri_lines(log: str) -> set[str]:
    """The device nodes a pod's :data:`LIST_DRI` printed."""
    return {line.split()[1] for line in log.splitlines() if line.startswith("dri ")}


def pod_dri(node: RealNode, name: str) -> set[str]:
    """What a running pod's :data:`LIST_DRI` printed, once its log has it."""
    wait_for(f"pod {name}'s device list", lambda: "dri " in pod_log(node, "default", name), timeout=30)
    return dri_lines(pod_log(node, "default", name))


def _templates(*templates: JSON) -> list[JSON]:
    return [{**t, "metadata": {**t["metadata"], "namespace": "default"}} for t in templates]


def _pod(name: str, template: str, script: str = LIST_DRI) -> JSON:
    return with_claims(workload_pod(name, NODE, script), {"gpu": template})


def _gone(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
    except ApiError as e:
        if e.status == 404:
            return True
        raise
    return False


def _delete_pod_and_claim(client: KubeClient, node: RealNode, name: str, claim: JSON | None) -> None:
    """Delete pod ``name``; wait until it and its generated claim are gone and the driver holds
    nothing more of the claim (CDI spec, checkpoint entry); the failure names what is left."""
    client.delete_if_present(f"{PODS}/{name}")
    wait_for(f"pod {name} deleted", lambda: _gone(client, f"{PODS}/{name}"), timeout=60)
    if claim is None:
        return
    uid, claim_name = claim["metadata"]["uid"], claim["metadata"]["name"]
    wait_for(
        f"claim {claim_name} deleted", lambda: _gone(client, claim_path("default", claim_name)), timeout=60
    )
    try:
        wait_for(
            f"nothing of claim {claim_name} left",
            lambda: not leftovers(node.layout, DRIVER, [uid]),
            timeout=30,
        )
    except TimeoutError as error:
        raise AssertionError(f"{error}: {leftovers(node.layout, DRIVER, [uid])}") from None


def _phase(client: KubeClient, name: str) -> str:
    return str(client.get(f"{PODS}/{name}").get("status", {}).get("phase", ""))


def _wait_phase(
    client: KubeClient, driver: DraDriver, name: str, phases: Sequence[str], timeout: float = 90
) -> JSON:
    """Pod ``name`` once its phase is one of ``phases``; the failure shows the pod's conditions,
    container states and events, and the driver pods."""

    def reached() -> JSON | None:
        driver.node.check_alive()
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
            f" containers {status.get('containerStatuses')}, events {seen}\n{driver.describe(client)}"
        ) from None


def run_claim_pod(client: KubeClient, driver: DraDriver, name: str, template: str) -> ClaimRun:
    """A pod with a claim from ``template``, seen Running with its claim (KCM deletes the claim of
    a pod that completed, so the pod sleeps); then deleted, checking that nothing of the claim is left."""
    claim: JSON | None = None
    try:
        pod, claim = start_claim_pod(client, driver, name, template)
        return ClaimRun(pod, claim, pod_dri(driver.node, name))
    finally:
        _delete_pod_and_claim(client, driver.node, name, claim or _claim_of(client, name))


def start_claim_pod(client: KubeClient, driver: DraDriver, name: str, template: str) -> tuple[JSON, JSON]:
    """A long-running pod with a claim from ``template``, once Running: (pod, its claim)."""
    client.create(PODS, _pod(name, template, f"{LIST_DRI}; sleep 3600"))
    pod = _wait_phase(client, driver, name, ("Running",))
    claim = client.get(claim_path("default", pod_claim_names(pod)["gpu"]))
    return pod, claim


# ----- 1. a claim gets exactly its card, through CDI --------------------------------------------


def test_claim_gets_exactly_its_card_through_cdi(driver: DraDriver, client: KubeClient) -> None:
    node = driver.node
    with created(client, _templates(claim_template("any-gpu", DRIVER))):
        client.create(PODS, _pod("one-gpu", "any-gpu", f"{LIST_DRI}; sleep 3600"))
        claim = None
        try:
            pod = _wait_phase(client, driver, "one-gpu", ("Running",))
            claim = client.get(claim_path("default", pod_claim_names(pod)["gpu"]))
            (device,) = allocated_devices(claim)
            pool, card = device.split("/")
            assert pool == NODE, claim["status"]["allocation"]
            uid = claim["metadata"]["uid"]
            # What containerd delivered: the per-claim spec the driver wrote, and nothing else of it.
            spec_file = spec_file_name(DRIVER, uid)
            assert claim_cdi_files(node.layout.cdi_run_dir, DRIVER) == [spec_file], (
                f"CDI specs of {DRIVER} in {node.layout.cdi_run_dir}"
            )
            assert uid in checkpoint_claims(node.layout.plugins_dir, DRIVER), (
                "claim missing from the checkpoint"
            )
            assert pod_dri(node, "one-gpu") == drm_nodes(node.layout, card), f"/dev/dri in the pod for {card}"
        finally:
            _delete_pod_and_claim(client, node, "one-gpu", claim)


SELECTIONS = {
    "pciId": ([f'device.attributes["{DRIVER}"].pciId == "0x56a5"'], {"card2"}),
    "driver": ([f'device.attributes["{DRIVER}"].driver == "xe"'], {"card3"}),
    "memory": (
        [
            f'"memory" in device.capacity["{DRIVER}"]'
            f' && device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0'
        ],
        {"card0", "card1"},
    ),
    "no-memory": ([f'device.capacity["{DRIVER}"].memory.compareTo(quantity("0")) == 0'], {"card4"}),
}


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_cel_selector_picks_the_right_card(driver: DraDriver, client: KubeClient, selection: str) -> None:
    selectors, expected = SELECTIONS[selection]
    name = f"by-{selection.lower()}"
    with created(client, _templates(claim_template(name, DRIVER, selectors=selectors))):
        run = run_claim_pod(client, driver, name, name)
    (device,) = run.cards
    card = card_of(driver.node.layout, device)
    assert card in expected, f"{selectors} allocated {card}, expected one of {sorted(expected)}"
    assert run.dri == drm_nodes(driver.node.layout, card), f"/dev/dri in the pod for {card}"


# ----- 2. sharing one card by capacity -----------------------------------------------------------


def test_two_pods_share_a_card_by_memory_and_a_third_waits(driver: DraDriver, client: KubeClient) -> None:
    """card3 is the only xe card (12 GiB): two claims of 4 GiB share it, a third of 6 GiB does not
    fit beside them and stays Pending, and runs once one of the two is gone."""
    xe = [f'device.attributes["{DRIVER}"].driver == "xe"']
    templates = _templates(
        claim_template("xe-4g", DRIVER, selectors=xe, capacity={"memory": "4Gi"}),
        claim_template("xe-6g", DRIVER, selectors=xe, capacity={"memory": "6Gi"}),
    )
    claims: dict[str, JSON | None] = {"share-a": None, "share-b": None, "share-c": None}
    with created(client, templates):
        try:
            for name in ("share-a", "share-b"):
                _, claims[name] = start_claim_pod(client, driver, name, "xe-4g")
            shared = [claims[n] for n in ("share-a", "share-b")]
            card3 = device_of(driver.node.layout, "card3")
            assert [allocated_devices(c) for c in shared if c] == [[f"{NODE}/{card3}"]] * 2
            results = [c["status"]["allocation"]["devices"]["results"][0] for c in shared if c]
            consumed = [quantity(r.get("consumedCapacity", {}).get("memory", "0")) for r in results]
            assert consumed == [4 * GIB, 4 * GIB], results
            share_ids = {r.get("shareID") for r in results}
            assert len(share_ids) == 2 and None not in share_ids, f"shareIDs {share_ids}"
            for name in ("share-a", "share-b"):
                assert pod_dri(driver.node, name) == drm_nodes(driver.node.layout, "card3"), (
                    f"/dev/dri in {name}"
                )

            client.create(PODS, _pod("share-c", "xe-6g", f"{LIST_DRI}; sleep 3600"))
            message = unschedulable_message(client, "share-c")
            assert "cannot allocate all claims" in message, message
            assert _phase(client, "share-c") == "Pending"

            _delete_pod_and_claim(client, driver.node, "share-a", claims["share-a"])
            claims["share-a"] = None
            pod = _wait_phase(client, driver, "share-c", ("Running",))
            third = claims["share-c"] = client.get(claim_path("default", pod_claim_names(pod)["gpu"]))
            assert allocated_devices(third) == [f"{NODE}/{device_of(driver.node.layout, 'card3')}"]
        finally:
            for name, claim in claims.items():
                _delete_pod_and_claim(client, driver.node, name, claim or _claim_of(client, name))


def _claim_of(client: KubeClient, pod_name: str) -> JSON | None:
    """The generated claim of a pod that may not exist or have one yet."""
    try:
        name = pod_claim_names(client.get(f"{PODS}/{pod_name}")).get("gpu")
        return client.get(claim_path("default", name)) if name else None
    except ApiError as e:
        if e.status == 404:
            return None
        raise


# ----- 3. the extended resource, served by DRA ---------------------------------------------------


def test_pod_asking_for_the_extended_resource_runs_on_the_dra_node(
    driver: DraDriver, client: KubeClient
) -> None:
    """No device plugin advertises gpu.intel.com/i915 on the node, so the scheduler serves the
    request through the DeviceClass that names it (i915.gpu.intel.com) and a claim of its own."""
    node = driver.node
    allocatable = client.get(f"/api/v1/nodes/{NODE}")["status"]["allocatable"]
    assert "gpu.intel.com/i915" not in allocatable or allocatable["gpu.intel.com/i915"] == "0", allocatable
    client.create(
        PODS, workload_pod("ext-i915", NODE, f"{LIST_DRI}; sleep 3600", limits={"gpu.intel.com/i915": "1"})
    )
    claim = None
    try:
        pod = _wait_phase(client, driver, "ext-i915", ("Running",))
        status = pod["status"].get("extendedResourceClaimStatus")
        assert status and status.get("resourceClaimName"), f"no extendedResourceClaimStatus: {pod['status']}"
        claim = client.get(claim_path("default", status["resourceClaimName"]))
        (device,) = allocated_devices(claim)
        card = device.split("/")[1]
        i915_cards = {"card0", "card1", "card2", "card4"}
        served = card_of(node.layout, card)
        assert served in i915_cards, f"gpu.intel.com/i915 served by {card} ({served}), not an i915 card"
        # The whole card: a request that names no capacity takes all of it.
        result = claim["status"]["allocation"]["devices"]["results"][0]
        published = published_devices(client, NODE, DRIVER)[card]
        memory = published.get("capacity", {}).get("memory", {}).get("value", "0")
        whole = "memory" if quantity(memory) else "millicores"
        consumed = result.get("consumedCapacity", {}).get(whole, "0")
        assert quantity(consumed) == quantity(published["capacity"][whole]["value"]), (
            whole,
            result,
            published,
        )
        assert pod_dri(node, "ext-i915") == drm_nodes(node.layout, card), f"/dev/dri in the pod for {card}"
    finally:
        _delete_pod_and_claim(client, node, "ext-i915", claim)


# ----- 4. health -----------------------------------------------------------------------------------

UNHEALTHY_TAINT = "HealthIssues-DeviceNodesMissing"
"""A card that lost some of its device nodes: a warning, so NoSchedule (running pods stay)."""


def _taints(client: KubeClient, card: str) -> list[JSON]:
    return list(published_devices(client, NODE, DRIVER).get(card, {}).get("taints", []))


def test_unhealthy_card_is_tainted_avoided_and_shown_in_the_pods_status(
    driver: DraDriver, client: KubeClient
) -> None:
    """Two A770s (card0, card1). A pod shares one of them (4 GiB of 16), whose render node then
    vanishes: the GPU plugin's health says Unhealthy. The slice taints that card (Intel's key
    ``HealthIssues-DeviceNodesMissing``, NoSchedule, no value), a new claim of the
    same kind lands on the other A770 although the first has room, and the running pod's status
    shows its card Unhealthy. With the node back the taint goes."""
    node = driver.node
    a770 = [f'device.attributes["{DRIVER}"].pciId == "0x56a0"']
    claims: dict[str, JSON | None] = {"health-a": None, "health-b": None}
    with created(
        client, _templates(claim_template("a770-4g", DRIVER, selectors=a770, capacity={"memory": "4Gi"}))
    ):
        restore: tuple[Path, int] | None = None
        try:
            _, claims["health-a"] = start_claim_pod(client, driver, "health-a", "a770-4g")
            (device,) = allocated_devices(claims["health-a"] or {})
            sick = device.split("/")[1]
            (other,) = {device_of(node.layout, c) for c in ("card0", "card1")} - {sick}
            render = next(n for n in sorted(drm_nodes(node.layout, sick)) if n.startswith("renderD"))
            path = node.dev_dir / "dri" / render
            minor = os.minor(path.stat().st_rdev)
            assert stat.S_ISCHR(path.stat().st_mode), path
            path.unlink()
            restore = (path, minor)

            def tainted() -> list[JSON] | None:
                found = [t for t in _taints(client, sick) if t.get("key") == UNHEALTHY_TAINT]
                return found or None

            try:
                (taint,) = wait_for(f"taint {UNHEALTHY_TAINT} on {sick}", tainted, timeout=60)
            except TimeoutError as error:
                raise AssertionError(
                    f"{error}; {sick} published as {published_devices(client, NODE, DRIVER).get(sick)}"
                ) from None
            assert taint.get("effect") == "NoSchedule" and "value" not in taint, taint
            assert not _taints(client, other), f"{other} is healthy but tainted"

            _, claims["health-b"] = start_claim_pod(client, driver, "health-b", "a770-4g")
            assert allocated_devices(claims["health-b"] or {}) == [f"{NODE}/{other}"], (
                f"the new claim should avoid tainted {sick}"
            )

            # The kubelet names a device by its first CDI ID when it has one (1.37,
            # buildResourceHealth), else as <driver>/<pool>/<device>.
            uid = (claims["health-a"] or {})["metadata"]["uid"]
            names = {f"k8s.{DRIVER}/claim={uid}-{sick}", f"{DRIVER}/{NODE}/{sick}"}

            def shown(health: str) -> JSON | None:
                found = device_health(client.get(f"{PODS}/health-a"))
                return next((found[n] for n in names if found.get(n, {}).get("health") == health), None)

            try:
                entry = wait_for(
                    f"{sick} Unhealthy in pod health-a's status", lambda: shown("Unhealthy"), timeout=60
                )
            except TimeoutError as error:
                statuses = client.get(f"{PODS}/health-a")["status"].get("containerStatuses")
                raise AssertionError(
                    f"{error} (as one of {sorted(names)}); container statuses {statuses}"
                ) from None
            assert render in entry.get("message", ""), f"the health message names no missing node: {entry}"

            make_char_device(path, minor)
            restore = None
            wait_for(f"taint on {sick} gone", lambda: not _taints(client, sick), timeout=60)
            wait_for(f"{sick} Healthy in pod health-a's status", lambda: shown("Healthy"), timeout=60)
        finally:
            if restore is not None:
                make_char_device(*restore)
            for name, claim in claims.items():
                _delete_pod_and_claim(client, node, name, claim or _claim_of(client, name))


# ----- 5. nothing leaks ------------------------------------------------------------------------------


def test_driver_restarted_after_prepare_unprepares_from_its_checkpoint(
    driver: DraDriver, client: KubeClient
) -> None:
    node = driver.node
    with created(client, _templates(claim_template("any-gpu", DRIVER))):
        claim = None
        try:
            _, claim = start_claim_pod(client, driver, "restart-after", "any-gpu")
            uid = claim["metadata"]["uid"]
            assert leftovers(node.layout, DRIVER, [uid]), (
                "the prepared claim has no CDI spec or checkpoint entry"
            )
            old = driver.restart(client)
            # The new instance keeps what the old one prepared while the pod runs.
            held = leftovers(node.layout, DRIVER, [uid])
            assert len(held) == 2, f"after restarting {old}: {held}"
            assert _phase(client, "restart-after") == "Running"
        finally:
            _delete_pod_and_claim(client, node, "restart-after", claim or _claim_of(client, "restart-after"))


def test_driver_killed_during_prepare_still_starts_the_pod(driver: DraDriver, client: KubeClient) -> None:
    """The driver is frozen (SIGSTOP) before a pod with a claim is created, so the kubelet's
    NodePrepareResources waits on it; then it is killed (SIGKILL, as a crash), the kubelet restarts
    its container and the call fails. The kubelet tries again at its next sync (10 s on this node),
    the restarted driver prepares the claim, the pod runs, and once it is deleted nothing is left."""
    node = driver.node
    name = "killed-during"
    with created(client, _templates(claim_template("any-gpu", DRIVER))):
        claim = None
        frozen = driver.process_ids()
        assert frozen, f"no {driver.command} process on {NODE}"
        connections = driver_connections(node, DRIVER)
        try:
            try:
                for pid in frozen:
                    os.kill(pid, signal.SIGSTOP)
                client.create(PODS, _pod(name, "any-gpu", f"{LIST_DRI}; sleep 3600"))
                claim = wait_claim_allocated(client, "default", name, "gpu")
                wait_for(
                    f"pod {name} bound to the node",
                    lambda: client.get(f"{PODS}/{name}")["spec"].get("nodeName") == NODE,
                    timeout=30,
                )
                time.sleep(2)  # the kubelet starts the pod within a fraction of that, and waits on the driver
                assert _phase(client, name) == "Pending"
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGKILL)
            _wait_phase(client, driver, name, ("Running",), timeout=120)
            failed = [
                e
                for e in events(client, "default", name)
                if e.get("reason") == "FailedPrepareDynamicResources"
            ]
            assert failed, "the kubelet's prepare never failed: the driver was not killed during it"
            driver.wait_ready(client, connections_before=connections)
            assert not set(frozen) & set(driver.process_ids()), "the killed driver process is still there"
            (device,) = allocated_devices(claim)
            assert pod_dri(node, name) == drm_nodes(node.layout, device.split("/")[1])
            driver.wait_published(client, CARDS)
        finally:
            _delete_pod_and_claim(client, node, name, claim or _claim_of(client, name))


def test_rolling_update_of_the_driver_serves_a_claim_made_meanwhile(
    driver: DraDriver, client: KubeClient
) -> None:
    """The DaemonSet rolls with a surge: the new instance registers beside the old one (its
    sockets carry its pod UID), so the kubelet always has a driver to prepare with. A pod created
    as the roll starts runs well within the kubelet's one-minute retry of a failed prepare, which
    a gap between the instances would cost; afterwards one new instance publishes every card."""
    node = driver.node
    with created(client, _templates(claim_template("any-gpu", DRIVER))):
        claim = None
        try:
            connections = driver_connections(node, DRIVER)
            old = driver.roll(client, wait=False)
            t0 = time.monotonic()
            client.create(PODS, _pod("during-roll", "any-gpu", f"{LIST_DRI}; sleep 3600"))
            pod = _wait_phase(client, driver, "during-roll", ("Running",), timeout=150)
            took = time.monotonic() - t0
            claim = client.get(claim_path("default", pod_claim_names(pod)["gpu"]))
            driver.wait_rolled(client, old, connections)
            assert took < 30, f"the pod took {took:.1f} s to run during the roll"
            (device,) = allocated_devices(claim)
            assert pod_dri(node, "during-roll") == drm_nodes(node.layout, device.split("/")[1])
            driver.wait_published(client, CARDS)
            # The old instance removed its own registration socket, and only that.
            sockets = sorted(p.name for p in node.plugins_registry_dir.iterdir())
            assert len(sockets) == 1, f"registration sockets after the roll: {sockets}"
        finally:
            _delete_pod_and_claim(client, node, "during-roll", claim or _claim_of(client, "during-roll"))


def test_kubelet_restart_keeps_the_pod_and_the_driver_publishes_again(
    driver: DraDriver, client: KubeClient
) -> None:
    """A starting kubelet deletes every ResourceSlice of its node; the driver, registered again
    with the new kubelet, publishes its cards again. The running pod keeps its card."""
    node = driver.node
    with created(client, _templates(claim_template("any-gpu", DRIVER))):
        claim = None
        try:
            _, claim = start_claim_pod(client, driver, "kubelet-restart", "any-gpu")
            before = {s["metadata"]["uid"] for s in node_slices(client, NODE, DRIVER)}
            count = driver_connections(node, DRIVER)
            node.restart_kubelet()
            driver.wait_ready(client, connections_before=count)

            def republished() -> bool:
                slices = node_slices(client, NODE, DRIVER)
                fresh = {s["metadata"]["uid"] for s in slices}
                return (
                    bool(slices)
                    and not fresh & before
                    and set(published_devices(client, NODE, DRIVER)) == CARDS
                )

            try:
                wait_for(
                    "the driver's slices deleted by the kubelet and published again", republished, timeout=90
                )
            except TimeoutError as error:
                now = {s["metadata"]["uid"] for s in node_slices(client, NODE, DRIVER)}
                raise AssertionError(
                    f"{error}; slice uids before {sorted(before)}, now {sorted(now)}, devices"
                    f" {sorted(published_devices(client, NODE, DRIVER))}\n{driver.describe(client)}"
                ) from None
            pod = client.get(f"{PODS}/kubelet-restart")
            assert pod["status"]["phase"] == "Running", pod["status"]
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
        finally:
            _delete_pod_and_claim(
                client, node, "kubelet-restart", claim or _claim_of(client, "kubelet-restart")
            )


def test_hot_plugged_card_is_published_served_and_withdrawn_when_unplugged(
    driver: DraDriver, client: KubeClient
) -> None:
    """A card hot-plugged (sysfs and device nodes written into the node) is published; a claim
    selecting it by PCI address gets it. Unplugged under the running pod, it leaves the slices, and
    deleting the pod still removes the claim's CDI spec and checkpoint entry."""
    node = driver.node
    tree = FakeTree(node.workdir)
    card = gpu.add_card(tree, driver="i915", device_id="0x56a0", memory_bytes=16 * GIB)
    node.realize_device_nodes()
    name = device_of(node.layout, f"card{card.index}")
    plugged = True
    selector = [f'device.attributes["resource.kubernetes.io"].pciBusID == "{card.address}"']
    with created(client, _templates(claim_template("hot-card", DRIVER, selectors=selector))):
        claim = None
        try:
            assert name not in CARDS
            published = driver.wait_published(client, CARDS | {name}, timeout=60)
            assert published[name]["attributes"]["pciId"]["string"] == "0x56a0", published[name]
            _, claim = start_claim_pod(client, driver, "hot-card", "hot-card")
            assert allocated_devices(claim) == [f"{NODE}/{name}"]
            assert pod_dri(node, "hot-card") == drm_nodes(node.layout, name)
            gpu.remove_card(tree, card.index)
            plugged = False
            driver.wait_published(client, CARDS, timeout=60)
            assert _phase(client, "hot-card") == "Running"
        finally:
            if plugged:
                gpu.remove_card(tree, card.index)
            _delete_pod_and_claim(client, node, "hot-card", claim or _claim_of(client, "hot-card"))
    driver.wait_published(client, CARDS, timeout=60)


def test_deleted_node_leaves_no_slices(
    driver: DraDriver, client: KubeClient, node_control_plane: ControlPlane
) -> None:
    """The node goes away without warning (stopped, so the driver cannot withdraw anything), then
    its Node object is deleted: the garbage collector deletes the slices it owns. Runs last."""
    slices = node_slices(client, NODE, DRIVER)
    assert slices, "no slices to begin with"
    owners = [o for s in slices for o in s["metadata"].get("ownerReferences", [])]
    assert owners and all(o["kind"] == "Node" and o["name"] == NODE for o in owners), owners
    driver.node.stop()
    client.delete(f"/api/v1/nodes/{NODE}")
    try:
        wait_for(
            f"the slices of deleted node {NODE} gone",
            lambda: not node_slices(client, NODE, DRIVER),
            timeout=90,
        )
    except TimeoutError as error:
        left = [s["metadata"]["name"] for s in node_slices(client, NODE, DRIVER)]
        raise AssertionError(f"{error}; left: {left}") from None
    finally:
        # Nothing on the node can confirm its pods' deletion any more.
        for pod in driver.pods(client):
            client.delete_if_present(
                f"/api/v1/namespaces/{driver.namespace}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0"
            )
