"""The reconcile shell against an in-memory stand-in for the API: apply, status, conflicts, errors."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import Status
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.workqueue import WorkQueue, backoff
from intel_device_plugins.operator import cli
from intel_device_plugins.operator.combined import COMBINED_DRA_NAME, COMBINED_NAME
from intel_device_plugins.operator.controller import (
    ALL_CRS,
    FIELD_MANAGER,
    ControllerConfig,
    Reconciler,
    owner_key,
)
from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from tests.builders import merge_patch

NS = "plugins"


def ds_status(desired: int, ready: int) -> dict[str, int]:
    """A status as the DaemonSet controller writes it (with the generation it has handled)."""
    return {
        "desiredNumberScheduled": desired,
        "numberReady": ready,
        "currentNumberScheduled": desired,
        "numberMisscheduled": 0,
        "observedGeneration": 1,
    }


# A new DaemonSet's status before the DaemonSet controller has seen it: zeros, no observedGeneration.
UNSEEN_STATUS = {
    "desiredNumberScheduled": 0,
    "numberReady": 0,
    "currentNumberScheduled": 0,
    "numberMisscheduled": 0,
}


class FakeApi:
    """Stores CRs, DaemonSets, pods and events as dicts; records the calls the reconciler makes."""

    def __init__(self) -> None:
        self.crs: dict[tuple[str, str], dict[str, Any]] = {}
        self.daemonsets: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.events: list[Event] = []
        self.applies: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.fail_next = 0
        self.gets = 0
        self.pod_lists = 0
        self.versions = itertools.count(100)

    def add_cr(self, kind: DeviceKind, name: str, spec: dict[str, Any]) -> None:
        self.crs[(kind.plural, name)] = {
            "apiVersion": "deviceplugin.intel.com/v1",
            "kind": kind.kind,
            "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": spec,
        }

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("api server restarting")

    async def get(self, res: Any, name: str) -> Any:
        self._maybe_fail()
        self.gets += 1
        key = (res._api_info.plural, name)
        if key not in self.crs:
            raise ApiError(status=Status(code=404, message="not found"))
        return res.from_dict(copy.deepcopy(self.crs[key]))

    async def patch(
        self,
        res: Any,
        name: str,
        obj: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.STRATEGIC,
        field_manager: str | None = None,
        force: bool = False,
    ) -> Any:
        self._maybe_fail()
        if res is DaemonSet:
            assert patch_type is PatchType.APPLY and field_manager == FIELD_MANAGER and force
            assert namespace == NS
            self.applies.append(copy.deepcopy(obj))
            stored = copy.deepcopy(obj)
            stored["metadata"]["uid"] = f"ds-{name}"
            stored["metadata"]["resourceVersion"] = str(next(self.versions))
            before = self.daemonsets.get(name)
            generation = before["metadata"]["generation"] if before else 0
            changed = before is None or before["spec"] != stored["spec"]
            stored["metadata"]["generation"] = generation + 1 if changed else generation
            stored["status"] = self.daemonsets.get(name, {}).get("status", dict(UNSEEN_STATUS))
            self.daemonsets[name] = stored
            return DaemonSet.from_dict(stored)
        assert patch_type is PatchType.MERGE
        plural = res._api_info.plural
        cr = self.crs[(plural, name)]
        cr["status"] = merge_patch(cr.get("status") or {}, obj["status"])
        cr["metadata"]["resourceVersion"] = str(next(self.versions))
        self.status_patches.append((name, obj["status"]))
        return copy.deepcopy(cr)  # the API server answers with the patched object

    def list(
        self,
        res: Any,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            if res is Pod:
                self.pod_lists += 1
                for pod in self.pods:
                    if all(pod["metadata"].get("labels", {}).get(k) == v for k, v in (labels or {}).items()):
                        yield Pod.from_dict(copy.deepcopy(pod))
            else:
                for (plural, _), cr in self.crs.items():
                    if plural == res._api_info.plural:
                        yield res.from_dict(copy.deepcopy(cr))

        return gen()

    async def create(self, obj: Any) -> Any:
        self.events.append(obj)
        return obj

    def add_pod(self, kind: DeviceKind, cr: str, node: str) -> None:
        # pods exist only once the DaemonSet controller has handled their DaemonSet
        self.daemonsets.setdefault(
            kind.daemonset_name(cr), {"metadata": {"generation": 1}, "spec": {}, "status": ds_status(0, 0)}
        )
        self.pods.append(
            {
                "metadata": {
                    "name": f"{cr}-{node}",
                    "namespace": NS,
                    "labels": {"app": kind.daemonset_base},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": kind.daemonset_name(cr),
                            "uid": "x",
                            "controller": True,
                        }
                    ],
                },
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
            }
        )


def make(
    api: FakeApi, env: dict[str, str] | None = None, kinds: tuple[DeviceKind, ...] = ALL_KINDS
) -> Reconciler:
    cfg = ControllerConfig(NS, kinds, env or {}, pull_secret="")
    return Reconciler(cast(AsyncClient, api), cfg, Metrics(), now=lambda: "2026-11-22T10:00:00Z")


GPU = {"image": "intel/intel-gpu-plugin:0.36.0", "nodeSelector": {"gpu": "yes"}}


async def test_reconcile_applies_owned_daemonset_and_writes_status_once() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    (applied,) = api.applies
    assert applied["metadata"]["name"] == "intel-gpu-plugin-a"
    assert applied["metadata"]["ownerReferences"][0]["uid"] == "uid-a"
    assert applied["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes"}
    # the new CR's DaemonSet is not handled yet: no status of zeros until the DaemonSet controller's write
    assert api.status_patches == [] and "status" not in api.crs[("gpudeviceplugins", "a")]

    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(0, 0)
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.status_patches) == 1
    status = api.crs[("gpudeviceplugins", "a")]["status"]
    assert status["controlledDaemonSet"]["name"] == "intel-gpu-plugin-a"
    assert status["conditions"][0]["type"] == "NodeConflict" and status["conditions"][0]["status"] == "False"

    await rec.reconcile(DeviceKind.GPU, "a")  # nothing changed: same apply body, no status write
    assert api.applies[1] == api.applies[0] and len(api.status_patches) == 1

    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(2, 1)
    api.add_pod(DeviceKind.GPU, "a", "n2")
    api.add_pod(DeviceKind.GPU, "a", "n1")
    await rec.reconcile(DeviceKind.GPU, "a")
    status = api.crs[("gpudeviceplugins", "a")]["status"]
    assert (status["desiredNumberScheduled"], status["numberReady"], status["nodeNames"]) == (
        2,
        1,
        ["n1", "n2"],
    )


async def test_dra_driver_cr_gets_the_driver_daemonset_under_its_service_account() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", {"image": node_image(), "deployAs": "DRADriver"})
    cfg = ControllerConfig(NS, ALL_KINDS, {}, dra_service_account="gpu-dra")
    rec = Reconciler(cast(AsyncClient, api), cfg, Metrics(), now=lambda: "2026-11-22T10:00:00Z")
    await rec.reconcile(DeviceKind.GPU, "a")
    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(0, 0)  # the DaemonSet controller has seen it
    await rec.reconcile(DeviceKind.GPU, "a")
    applied, again = api.applies
    assert again == applied
    assert applied["metadata"]["name"] == "intel-gpu-plugin-a"
    pod = applied["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-dra"
    assert pod["containers"][0]["command"] == ["intel_gpu_dra_driver"]
    status = api.crs[("gpudeviceplugins", "a")]["status"]
    assert status["controlledDaemonSet"]["name"] == "intel-gpu-plugin-a"


async def test_watch_events_that_echo_own_writes_are_not_queued() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(0, 0)  # the DaemonSet controller has seen it
    await rec.reconcile(DeviceKind.GPU, "a")
    cr, ds = api.crs[("gpudeviceplugins", "a")], api.daemonsets["intel-gpu-plugin-a"]
    assert "status" in cr
    rec.on_cr_event(DeviceKind.GPU, "MODIFIED", cr)  # our status write coming back
    rec.on_daemonset_event("ADDED", ds)  # our apply coming back
    assert len(rec.queue) == 0
    rec.on_daemonset_event("DELETED", ds)  # a deletion is never an echo
    assert len(rec.queue) == 1
    changed = copy.deepcopy(cr)
    changed["metadata"]["resourceVersion"] = "999"  # someone else wrote after us
    rec.on_cr_event(DeviceKind.GPU, "MODIFIED", changed)
    assert len(rec.queue) == 1  # the same key, once
    assert await rec.queue.get() == (DeviceKind.GPU, "a")


async def test_the_watched_body_spares_reading_the_cr_again() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    rec.on_cr_event(DeviceKind.GPU, "ADDED", copy.deepcopy(api.crs[("gpudeviceplugins", "a")]))
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.gets == 0 and len(api.applies) == 1 and len(api.status_patches) == 0
    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(0, 0)  # the DaemonSet controller has seen it
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.gets == 0 and len(api.status_patches) == 1
    await rec.reconcile(DeviceKind.GPU, "a")  # the status write's answer is the body now: nothing to write
    assert api.gets == 0 and len(api.status_patches) == 1
    changed = copy.deepcopy(api.crs[("gpudeviceplugins", "a")])
    changed["spec"]["logLevel"] = 4
    changed["metadata"]["resourceVersion"] = "900"
    rec.on_cr_event(DeviceKind.GPU, "MODIFIED", changed)
    await rec.reconcile(DeviceKind.GPU, "a")
    args = api.applies[-1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert api.gets == 0 and args[:2] == ["-v", "4"]
    rec.on_cr_event(DeviceKind.GPU, "DELETED", changed)
    rec.on_cr_event(DeviceKind.GPU, "ADDED", changed)  # created again: known, but not from the cache
    rec.on_cr_list(DeviceKind.GPU, [])  # a relist without it: deleted while the watch was away
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.gets == 0 and len(api.applies) == 4  # known gone: neither read nor applied


async def test_the_pod_list_waits_for_the_daemonset_controller() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")  # the DaemonSet is new: no pods can be named yet
    assert api.pod_lists == 0 and len(api.applies) == 1
    ds = copy.deepcopy(api.daemonsets["intel-gpu-plugin-a"])
    ds["status"] = ds_status(1, 0)  # the controller's first status write, after its first pod
    ds["metadata"]["resourceVersion"] = "501"
    api.daemonsets["intel-gpu-plugin-a"] = copy.deepcopy(ds)
    api.add_pod(DeviceKind.GPU, "a", "n1")
    rec.on_daemonset_event("MODIFIED", ds)
    assert await rec.queue.get() == (DeviceKind.GPU, "a")
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.pod_lists == 1
    assert api.crs[("gpudeviceplugins", "a")]["status"]["nodeNames"] == ["n1"]


async def next_key(rec: Reconciler) -> tuple[DeviceKind, str]:
    """The next queued key, handed back as a worker does (a key is handed out again only once done)."""
    key = await asyncio.wait_for(rec.queue.get(), 1)
    rec.queue.done(key)
    return key


async def test_watched_pods_replace_the_pod_list() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    api.add_pod(DeviceKind.GPU, "a", "n1")
    api.add_pod(DeviceKind.QAT, "q", "n1")  # another kind's pod: not this CR's
    rec = make(api)
    rec.on_cr_event(DeviceKind.GPU, "ADDED", copy.deepcopy(api.crs[("gpudeviceplugins", "a")]))
    rec.on_pod_list(copy.deepcopy(api.pods))
    assert await next_key(rec) == (DeviceKind.GPU, "a")  # a (re)list looks at every CR again
    api.daemonsets["intel-gpu-plugin-a"]["status"] = ds_status(1, 1)
    await rec.reconcile(DeviceKind.GPU, "a")
    api.daemonsets["intel-gpu-plugin-a"]["metadata"]["resourceVersion"] = "700"
    rec.on_daemonset_event("MODIFIED", copy.deepcopy(api.daemonsets["intel-gpu-plugin-a"]))
    assert await next_key(rec) == (DeviceKind.GPU, "a")
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.pod_lists == 0
    assert api.crs[("gpudeviceplugins", "a")]["status"]["nodeNames"] == ["n1"]

    api.add_pod(DeviceKind.GPU, "a", "n2")
    rec.on_pod_event("ADDED", copy.deepcopy(api.pods[-1]))  # may come after the DaemonSet's status
    assert await next_key(rec) == (DeviceKind.GPU, "a")
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.crs[("gpudeviceplugins", "a")]["status"]["nodeNames"] == ["n1", "n2"]

    ready = copy.deepcopy(api.pods[-1])
    ready["status"] = {"phase": "Running"}
    rec.on_pod_event("MODIFIED", ready)  # nothing the status reads of a pod changed
    assert len(rec.queue) == 0
    rec.on_pod_event("DELETED", ready)
    assert await next_key(rec) == (DeviceKind.GPU, "a")
    await rec.reconcile(DeviceKind.GPU, "a")
    assert api.crs[("gpudeviceplugins", "a")]["status"]["nodeNames"] == ["n1"]
    assert api.pod_lists == 0


def test_pod_fields_of_a_watched_pod_are_its_list_summary() -> None:
    from intel_device_plugins.operator.controller import _pod_fields, _pod_record, _pod_summary

    owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": True}]
    affinity: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    for meta, spec in (
        ({"name": "p1", "ownerReferences": owner}, {"nodeName": "n1"}),
        ({"name": "p2", "ownerReferences": owner}, {"affinity": affinity}),
        ({"name": "p3"}, {"nodeName": "n9"}),
    ):
        pod = cast(Pod, Pod.from_dict({"metadata": meta, "spec": {**spec, "containers": [{"name": "c"}]}}))
        assert _pod_fields(pod.to_dict()) == _pod_summary(pod)
        assert _pod_fields(_pod_record(pod.to_dict())) == _pod_summary(pod)  # the cache's reduced form


async def test_a_reported_conflict_is_looked_at_even_before_the_daemonset_controller() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    conflict = {"type": "NodeConflict", "status": "True", "reason": "NodeConflict", "message": "m"}
    api.crs[("gpudeviceplugins", "a")]["status"] = {"conditions": [conflict]}
    await make(api).reconcile(DeviceKind.GPU, "a")  # its DaemonSet was deleted by hand: a new one
    assert api.pod_lists == 1
    assert api.crs[("gpudeviceplugins", "a")]["status"]["conditions"][0]["status"] == "False"


async def test_a_deleted_crs_conflicting_siblings_are_queued_from_the_watched_bodies() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    api.add_cr(DeviceKind.GPU, "b", GPU)
    api.add_cr(DeviceKind.GPU, "c", GPU)
    for cr, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        api.add_pod(DeviceKind.GPU, cr, node)
    rec = make(api)
    for name in ("a", "b", "c"):
        rec.on_cr_event(DeviceKind.GPU, "ADDED", copy.deepcopy(api.crs[("gpudeviceplugins", name)]))
    while len(rec.queue):
        key = await rec.queue.get()
        await rec.reconcile(*key)
        rec.queue.done(key)
    assert api.crs[("gpudeviceplugins", "b")]["status"]["conditions"][0]["status"] == "True"
    rec.on_cr_event(DeviceKind.GPU, "DELETED", api.crs.pop(("gpudeviceplugins", "a")))
    assert await rec.queue.get() == (DeviceKind.GPU, "a")
    await rec.reconcile(DeviceKind.GPU, "a")
    rec.queue.done((DeviceKind.GPU, "a"))
    assert api.gets == 0
    assert await rec.queue.get() == (DeviceKind.GPU, "b") and len(rec.queue) == 0  # c had no conflict


async def test_a_daemonset_still_as_applied_is_not_applied_again() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    ds = copy.deepcopy(api.daemonsets["intel-gpu-plugin-a"])
    ds["status"] = ds_status(3, 0)  # the controller manager moved the status only
    ds["metadata"]["resourceVersion"] = "500"
    rec.on_daemonset_event("MODIFIED", ds)
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.applies) == 1
    assert api.crs[("gpudeviceplugins", "a")]["status"]["desiredNumberScheduled"] == 3
    edited = copy.deepcopy(ds)
    edited["metadata"]["labels"]["app"] = "renamed"  # a hand edit of a managed label keeps the generation
    rec.on_daemonset_event("MODIFIED", edited)
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.applies) == 2
    respecced = copy.deepcopy(api.daemonsets["intel-gpu-plugin-a"])
    respecced["metadata"]["generation"] += 1  # a hand edit of the spec
    rec.on_daemonset_event("MODIFIED", respecced)
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.applies) == 3


async def test_a_deleted_crs_daemonset_going_needs_no_reconcile() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    cr = api.crs.pop(("gpudeviceplugins", "a"))
    rec.on_cr_event(DeviceKind.GPU, "DELETED", cr)
    assert await rec.queue.get() == (DeviceKind.GPU, "a")
    reads = api.gets
    await rec.reconcile(DeviceKind.GPU, "a")
    rec.queue.done((DeviceKind.GPU, "a"))
    assert api.gets == reads  # known gone: not read again
    rec.on_daemonset_event("DELETED", api.daemonsets["intel-gpu-plugin-a"])  # garbage collection
    assert len(rec.queue) == 0


async def test_sha_override_reaches_the_daemonset() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.SGX, "s", {"image": "intel/intel-sgx-plugin:0.36.0"})
    pinned = "intel/intel-sgx-plugin@sha256:" + "a" * 64
    await make(api, {"INTEL_SGX_PLUGIN_SHA": pinned}).reconcile(DeviceKind.SGX, "s")
    assert api.applies[0]["spec"]["template"]["spec"]["containers"][0]["image"] == pinned
    assert api.crs[("sgxdeviceplugins", "s")]["spec"]["image"] == "intel/intel-sgx-plugin:0.36.0"


async def test_deleted_cr_is_quietly_done() -> None:
    api = FakeApi()
    await make(api).reconcile(DeviceKind.QAT, "gone")
    assert api.applies == [] and api.status_patches == []


async def test_invalid_spec_reports_instead_of_applying() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "bad", {"sharedDevNum": "lots"})
    await make(api).reconcile(DeviceKind.GPU, "bad")
    assert api.applies == []
    cond = api.crs[("gpudeviceplugins", "bad")]["status"]["conditions"][0]
    assert cond["type"] == "SpecValid" and "spec.sharedDevNum" in cond["message"]
    assert api.events[0].reason == "InvalidSpec"


async def test_overlapping_crs_get_condition_and_event() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    api.add_cr(DeviceKind.GPU, "b", GPU)
    for cr, node in (("a", "n1"), ("a", "n2"), ("b", "n2")):
        api.add_pod(DeviceKind.GPU, cr, node)
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    cond = api.crs[("gpudeviceplugins", "a")]["status"]["conditions"][0]
    assert cond["status"] == "True" and "GpuDevicePlugin b on n2" in cond["message"]
    assert [e.reason for e in api.events] == ["NodeConflict"]
    assert api.events[0].involvedObject is not None and api.events[0].involvedObject.name == "a"
    assert len(rec.queue) == 1  # b is queued to learn about the conflict too
    assert await rec.queue.get() == (DeviceKind.GPU, "b")
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.events) == 1  # no repeated event while the conflict persists


async def test_disabled_kinds_are_not_queued() -> None:
    rec = make(FakeApi(), kinds=(DeviceKind.GPU,))
    rec.enqueue(DeviceKind.QAT, "x")
    rec.enqueue(DeviceKind.GPU, "")
    assert len(rec.queue) == 0
    rec.enqueue(DeviceKind.GPU, "y")
    rec.enqueue(DeviceKind.GPU, "y")
    assert len(rec.queue) == 1


async def test_worker_survives_api_errors_and_retries() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.NPU, "n", {"image": "intel/intel-npu-plugin:0.36.0"})
    api.fail_next = 2
    rec = make(api)
    rec.enqueue(DeviceKind.NPU, "n")
    task = asyncio.create_task(rec.run())
    for _ in range(100):
        if api.applies:
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert api.applies and rec.metrics.reconcile_errors == 2


def test_owner_key() -> None:
    ds = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Thing", "name": "t", "controller": False},
                {
                    "apiVersion": "deviceplugin.intel.com/v1",
                    "kind": "DsaDevicePlugin",
                    "name": "d",
                    "controller": True,
                },
            ]
        }
    }
    assert owner_key(ds, ALL_KINDS) == (DeviceKind.DSA, "d")
    assert owner_key(ds, (DeviceKind.GPU,)) is None
    odd = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "deviceplugin.intel.com/v1", "kind": "Nope", "name": "x", "controller": True}
            ]
        }
    }
    assert owner_key(odd, ALL_KINDS) is None
    assert owner_key({}, ALL_KINDS) is None


async def test_workqueue_dedupes_and_requeues_dirty_keys() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    key = await q.get()
    q.add(key)  # changed while being processed
    assert len(q) == 1
    q.done(key)
    assert len(q) == 2
    assert q.done("b", failed=True) == backoff(1)
    assert backoff(1) < backoff(2) < backoff(30) == 30.0


def test_pod_summary_keeps_what_status_needs() -> None:
    from intel_device_plugins.operator.controller import _pod_summary
    from intel_device_plugins.operator.reconcile import nodes_by_daemonset

    owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": True}]
    running = Pod.from_dict(
        {
            "metadata": {"name": "p1", "ownerReferences": owner},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        }
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                ]
            }
        }
    }
    pending = Pod.from_dict(
        {
            "metadata": {"name": "p2", "ownerReferences": owner},
            "spec": {"affinity": affinity, "containers": [{"name": "c"}]},
        }
    )
    orphan = Pod.from_dict(
        {"metadata": {"name": "p3"}, "spec": {"nodeName": "n9", "containers": [{"name": "c"}]}}
    )
    summaries = [_pod_summary(cast(Pod, p)) for p in (running, pending, orphan)]
    assert nodes_by_daemonset(summaries) == {"ds": ("n1", "n2")}


async def test_status_written_by_an_older_operator_converges() -> None:
    api = FakeApi()
    api.add_cr(DeviceKind.GPU, "a", GPU)
    api.crs[("gpudeviceplugins", "a")]["status"] = {
        "desiredNumberScheduled": 0,
        "numberReady": 0,
        "nodeNames": None,
        "controlledDaemonSet": {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "intel-gpu-plugin-a",
            "namespace": NS,
            "uid": "ds-intel-gpu-plugin-a",
            "resourceVersion": "42",
        },
        "somebodyElse": "kept",
    }
    rec = make(api)
    await rec.reconcile(DeviceKind.GPU, "a")
    status = api.crs[("gpudeviceplugins", "a")]["status"]
    assert "resourceVersion" not in status["controlledDaemonSet"] and status["somebodyElse"] == "kept"
    await rec.reconcile(DeviceKind.GPU, "a")
    assert len(api.status_patches) == 1


async def test_wait_for_crds_until_served_or_stopped() -> None:
    import threading

    from intel_device_plugins.operator.controller import wait_for_crds

    class Discovery:
        def __init__(self) -> None:
            self.served: set[str] = {"gpudeviceplugins"}
            self.calls = 0

        def list(self, res: Any, **_: Any) -> AsyncIterator[Any]:
            self.calls += 1
            plural = res._api_info.plural
            if self.calls == 3:
                self.served.add("qatdeviceplugins")

            async def gen() -> AsyncIterator[Any]:
                if plural not in self.served:
                    raise ApiError(status=Status(code=404, message="no such resource"))
                for _ in ():
                    yield None

            return gen()

    api = Discovery()
    stop = threading.Event()
    kinds = (DeviceKind.GPU, DeviceKind.QAT)
    assert await wait_for_crds(cast(AsyncClient, api), kinds, stop, retry_s=0.01)
    assert api.calls == 3
    stop.set()
    assert not await wait_for_crds(cast(AsyncClient, Discovery()), (DeviceKind.SGX,), stop, retry_s=0.01)


# ----- combined mode: one DaemonSet for all CRs, each CR's status still its own -----


class CombinedApi(FakeApi):
    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    async def delete(self, res: Any, name: str, *, namespace: str | None = None) -> None:
        assert res is DaemonSet and namespace == NS
        self.deleted.append(name)
        self.daemonsets.pop(name, None)

    def add_combined_pod(self, node: str) -> None:
        self.add_pod(DeviceKind.GPU, "x", node)
        pod = self.pods[-1]
        pod["metadata"]["labels"] = {"app": COMBINED_NAME}
        pod["metadata"]["ownerReferences"][0]["name"] = COMBINED_NAME


def make_combined(api: FakeApi) -> Reconciler:
    cfg = ControllerConfig(NS, ALL_KINDS, {}, combined=True)
    return Reconciler(cast(AsyncClient, api), cfg, Metrics(), now=lambda: "2026-11-23T10:00:00Z")


def combined_spec(kind: DeviceKind, **extra: Any) -> dict[str, Any]:
    return {"image": f"intel/intel-{kind.value}-plugin:0.36.0", **extra}


async def test_one_daemonset_and_every_crs_status() -> None:
    api = CombinedApi()
    api.add_cr(DeviceKind.GPU, "gpu", combined_spec(DeviceKind.GPU, nodeSelector={"gpu": "yes"}))
    api.add_cr(DeviceKind.QAT, "qat", combined_spec(DeviceKind.QAT, nodeSelector={"qat": "yes"}))
    rec = make_combined(api)
    await rec.reconcile(DeviceKind.QAT, "qat")
    (applied,) = api.applies
    assert applied["metadata"]["name"] == COMBINED_NAME
    args = applied["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a.split()[0] for a in args[3::2]] == ["gpu", "qat"]
    api.daemonsets[COMBINED_NAME]["status"] = ds_status(2, 2)
    api.add_combined_pod("n1")
    api.add_combined_pod("n2")
    await rec.reconcile(DeviceKind.GPU, "gpu")
    for plural, name in (("gpudeviceplugins", "gpu"), ("qatdeviceplugins", "qat")):
        status = api.crs[(plural, name)]["status"]
        assert status["controlledDaemonSet"]["name"] == COMBINED_NAME
        assert (status["desiredNumberScheduled"], status["numberReady"]) == (2, 2)
        assert status["nodeNames"] == ["n1", "n2"]
    writes = len(api.status_patches)
    await rec.reconcile(DeviceKind.GPU, "gpu")  # idle: nothing written
    assert len(api.status_patches) == writes


async def test_a_second_cr_of_a_kind_is_reported_not_served() -> None:
    api = CombinedApi()
    api.add_cr(DeviceKind.GPU, "b", combined_spec(DeviceKind.GPU))
    api.add_cr(DeviceKind.GPU, "a", combined_spec(DeviceKind.GPU))
    await make_combined(api).reconcile(DeviceKind.GPU, "b")
    assert [r["name"] for r in api.applies[0]["metadata"]["ownerReferences"]] == ["a"]
    (cond,) = api.crs[("gpudeviceplugins", "b")]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "CombinedProcess",
        "False",
        "KindServedByAnotherCR",
    )
    assert "a is served" in cond["message"]


async def test_invalid_spec_is_reported_and_the_others_still_served() -> None:
    api = CombinedApi()
    api.add_cr(DeviceKind.GPU, "bad", {"sharedDevNum": "many"})
    api.add_cr(DeviceKind.SGX, "sgx", combined_spec(DeviceKind.SGX))
    await make_combined(api).reconcile(DeviceKind.GPU, "bad")
    assert [r["name"] for r in api.applies[0]["metadata"]["ownerReferences"]] == ["sgx"]
    (cond,) = api.crs[("gpudeviceplugins", "bad")]["status"]["conditions"]
    assert cond["type"] == "SpecValid" and cond["status"] == "False" and "sharedDevNum" in cond["message"]


async def test_dra_driver_crs_run_in_one_dra_drivers_daemonset() -> None:
    api = CombinedApi()
    api.add_cr(DeviceKind.GPU, "dra", {"image": node_image(), "deployAs": "DRADriver"})
    api.add_cr(DeviceKind.QAT, "qat-dra", {"image": node_image(), "deployAs": "DRADriver"})
    api.add_cr(DeviceKind.SGX, "sgx", combined_spec(DeviceKind.SGX))
    rec = Reconciler(
        cast(AsyncClient, api),
        ControllerConfig(NS, ALL_KINDS, {}, combined=True, dra_service_account="dra-sa"),
        Metrics(),
        now=lambda: "2026-11-23T10:00:00Z",
    )
    await rec.reconcile(DeviceKind.GPU, "dra")
    by_name = {a["metadata"]["name"]: a for a in api.applies}
    assert set(by_name) == {COMBINED_NAME, COMBINED_DRA_NAME}
    plugins, drivers = by_name[COMBINED_NAME], by_name[COMBINED_DRA_NAME]
    assert [r["name"] for r in plugins["metadata"]["ownerReferences"]] == ["sgx"]
    assert [r["name"] for r in drivers["metadata"]["ownerReferences"]] == ["dra", "qat-dra"]
    pod_spec = drivers["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert container["command"] == ["intel_dra_drivers"]
    drivers_args = [container["args"][i + 1] for i, a in enumerate(container["args"]) if a == "--driver"]
    assert [d.split()[0] for d in drivers_args] == ["gpu", "qat"]
    assert pod_spec["serviceAccountName"] == "dra-sa"
    for name in ("dra", "qat-dra"):
        plural = "gpudeviceplugins" if name == "dra" else "qatdeviceplugins"
        status = api.crs[(plural, name)]["status"]
        assert status["controlledDaemonSet"]["name"] == COMBINED_DRA_NAME


async def test_no_dra_driver_cr_left_deletes_the_dra_drivers_daemonset() -> None:
    api = CombinedApi()
    api.add_cr(DeviceKind.SGX, "sgx", combined_spec(DeviceKind.SGX))
    rec = make_combined(api)
    await rec.reconcile(DeviceKind.SGX, "sgx")
    assert api.deleted == [], "no DRA DaemonSet was seen: nothing to delete"
    rec.on_daemonset_event("ADDED", {"metadata": {"name": COMBINED_DRA_NAME}})
    await rec.reconcile(DeviceKind.SGX, "sgx")
    assert api.deleted == [COMBINED_DRA_NAME]


async def test_no_cr_left_deletes_the_daemonset() -> None:
    api = CombinedApi()
    api.daemonsets[COMBINED_NAME] = {"metadata": {"name": COMBINED_NAME}}
    await make_combined(api).reconcile(DeviceKind.GPU, "gone")
    assert api.deleted == [COMBINED_NAME] and not api.applies


def test_every_event_queues_one_combined_reconcile() -> None:
    rec = make_combined(CombinedApi())
    rec.enqueue(DeviceKind.GPU, "a")
    rec.enqueue(DeviceKind.QAT, "b")
    rec.enqueue_all()
    assert len(rec.queue) == 1 and rec.queue._waiting == {(ALL_KINDS[0], ALL_CRS)}


def test_setting_from_flag_and_env() -> None:
    p = cli.parser()
    assert p.parse_args(["-combined-plugin-process"]).combined_plugin_process
    assert not p.parse_args([]).combined_plugin_process
    assert cli.combined_mode(False, {"DEVICEPLUGIN_COMBINED": "true"}) is True
    assert cli.combined_mode(True, {"DEVICEPLUGIN_COMBINED": "false"}) is False
    assert cli.combined_mode(True, {}) is True
    try:
        cli.combined_mode(False, {"DEVICEPLUGIN_COMBINED": "maybe"})
    except cli.UsageError as exc:
        assert "DEVICEPLUGIN_COMBINED" in str(exc)
    else:
        raise AssertionError("a bad DEVICEPLUGIN_COMBINED must be refused")


def test_the_dra_service_account_is_read_under_its_current_and_its_old_name() -> None:
    assert (
        cli.dra_service_account(
            {"DRA_DRIVER_SERVICE_ACCOUNT": "new", "GPU_DRA_DRIVER_SERVICE_ACCOUNT": "old"}
        )
        == "new"
    )
    assert cli.dra_service_account({"GPU_DRA_DRIVER_SERVICE_ACCOUNT": "old"}) == "old"
    assert cli.dra_service_account({}) == ""
