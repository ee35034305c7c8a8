"""``intel-rmd-operator``: the RmdConfig, RmdNodeState and RmdWorkload controllers against the API server.

Watches (lightkube, reconnecting) only queue keys; workers reconcile each key from the current state of the
cluster and of RMD (level-based), using the pure plans of ``reconcile.py``, so a repeat changes nothing.
Reads of RMD are the operator's main idle cost, so they follow events: a node state is read a few seconds
after a workload changed its RMD or found it unreadable, and when its RMD pod changes (the kubelet finding
it unready, a restarted container); a workload is reconciled when its node state shows RMD lost it. The
periodic re-queues are a safety net: RmdWorkloads every ``workload_resync_s``, RmdNodeStates every
``node_state_period_s`` (both 300 s), every ``retry_s`` while RMD cannot be read. One timer per key. Nodes
are listed by the RmdConfig reconcile (every ``config_resync_s``) rather than watched, because of their
heartbeats. The same reconcile rotates RMD's certificates (``rotation.py``). One replica reconciles at a
time (a Lease).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import socket
import sys
import time
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import aiohttp
from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod, Secret
from lightkube.types import PatchType

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.kube.apierrors import is_status
from intel_device_plugins.kube.leader import ElectionConfig, LeaderElector
from intel_device_plugins.kube.watch import as_events, follow
from intel_device_plugins.kube.workqueue import WorkQueue, run_worker
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging
from intel_device_plugins.rmd import images, rotation
from intel_device_plugins.rmd import reconcile as rc
from intel_device_plugins.rmd.client import (
    RmdApiError,
    RmdCallError,
    RmdClient,
    RmdUnreachable,
    TlsConfigError,
    TlsReloader,
    Transport,
)
from intel_device_plugins.rmd.model import (
    CONFIG_NAME,
    GROUP,
    VERSION,
    RmdConfigSpec,
    RmdWorkloadSpec,
    SpecError,
    parse,
)
from intel_device_plugins.rmd.payload import host_cpus, workload_uuid

log = logging.getLogger(__name__)

FIELD_MANAGER: Final = "intel-rmd-operator"
LEASE_NAME: Final = "intel-rmd-operator-lock"

RmdWorkload = create_namespaced_resource(GROUP, VERSION, "RmdWorkload", "rmdworkloads")
RmdNodeState = create_namespaced_resource(GROUP, VERSION, "RmdNodeState", "rmdnodestates")
RmdConfig = create_namespaced_resource(GROUP, VERSION, "RmdConfig", "rmdconfigs")

Key = tuple[str, ...]  # ("config",) | ("node", node) | ("workload", namespace, name)
CONFIG_KEY: Final[Key] = ("config",)


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    namespace: str
    transport: Transport
    endpoints: Mapping[str, str] = dataclasses.field(default_factory=dict)  # node → RMD URL override
    workers: int = 4
    workload_resync_s: float = 300.0
    node_state_period_s: float = 300.0
    config_resync_s: float = 30.0
    node_state_settle_s: float = 5.0  # a node state is read this long after a workload changed its RMD
    retry_s: float = 5.0
    cleanup_grace_s: float = 120.0
    node_image: str = dataclasses.field(default_factory=images.default_node_image)  # agent and plugin
    rotate_certs: bool = True
    cert_validity: dt.timedelta = dt.timedelta(days=90)
    rotation_grace_s: float = 300.0  # a rotation step reaches every client (kubelet sync + their reload)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict()
    return out


def _secret_data(secret: Any) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def _age_s(timestamp: str) -> float:
    try:
        then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (dt.datetime.now(dt.UTC) - then).total_seconds()


class RmdOperator:
    """Reconcilers for the three kinds; ``run`` starts watches, workers and periodic re-queues."""

    def __init__(self, client: AsyncClient, session: aiohttp.ClientSession, cfg: OperatorConfig) -> None:
        self.client = client
        self.session = session
        self.cfg = cfg
        self.queue: WorkQueue[Key] = WorkQueue()
        self._timers: dict[Key, asyncio.TimerHandle] = {}  # the next periodic reconcile of each key
        self.reconciled = 0
        # Status of every RmdWorkload, kept from the watch: node-state reconciles read it instead of listing.
        self.workload_status: dict[tuple[str, str], Mapping[str, Any]] = {}
        # Every node as the last RmdConfig reconcile listed it: other reconciles read nodes here.
        self.node_cache: dict[str, tuple[rc.NodeInfo, list[str]]] = {}
        self.node_states: dict[str, Mapping[str, Any]] = {}  # latest RmdNodeState per node, from the watch

    # ---------------------------------------------------------------- plumbing

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(
                run_worker(self.queue, self._reconcile_counted, self._failed, self.look_again)
            )
            for _ in range(self.cfg.workers)
        ]
        tasks += [
            asyncio.create_task(self._watch(RmdConfig, self.cfg.namespace, self._on_config)),
            asyncio.create_task(self._watch(RmdNodeState, self.cfg.namespace, self._on_node_state)),
            asyncio.create_task(self._watch(RmdWorkload, "*", self._on_workload)),
            asyncio.create_task(self._watch(Pod, self.cfg.namespace, self._on_rmd_pod, rc.RMD_POD_LABELS)),
        ]
        self.queue.add(CONFIG_KEY)
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _watch(
        self, res: Any, namespace: str | None, handler: Any, labels: Mapping[str, str] | None = None
    ) -> Coroutine[Any, Any, None]:
        return follow(self.client, res, as_events(handler), handler, namespace=namespace, labels=labels)

    def _on_config(self, event: str, body: Mapping[str, Any]) -> None:
        self.queue.add(CONFIG_KEY)

    def _on_node_state(self, event: str, body: Mapping[str, Any]) -> None:
        node = str((body.get("spec") or {}).get("node") or "")
        if event == "DELETED":
            self.node_states.pop(node, None)
        else:
            self.node_states[node] = body
        if event == "MODIFIED":
            return  # only this operator writes node states; the periodic re-read drives them
        if node and body.get("metadata", {}).get("name") == rc.node_state_name(node):
            self.queue.add(("node", node))

    def _on_workload(self, event: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        status = body.get("status") or {}
        if event == "DELETED":
            self.workload_status.pop(key, None)
        else:
            self.workload_status[key] = status
        if (
            event == "MODIFIED"
            and not meta.get("deletionTimestamp")
            and meta.get("generation") is not None
            and status.get("observedGeneration") == meta.get("generation")
        ):
            return  # our own status write; the spec is already handled
        self.queue.add(("workload", *key))

    def _on_rmd_pod(self, event: str, body: Mapping[str, Any]) -> None:
        node = (body.get("spec") or {}).get("nodeName")
        if node:
            self.queue.add(("node", str(node)))

    async def _reconcile_counted(self, key: Key) -> float | None:
        try:
            return await self.reconcile(key)
        finally:
            self.reconciled += 1

    def _failed(self, key: Key, exc: Exception) -> None:
        log.warning("reconcile %s failed: %s", "/".join(key), exc)

    def look_again(self, key: Key, delay: float | None) -> None:
        """Schedule the next periodic reconcile of ``key`` (None: none), replacing any scheduled one.

        One timer per key: a reconcile caused by an event must not start a second periodic chain beside the
        first, or every event would add reads that repeat forever.
        """
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous.cancel()
        if delay is not None:
            self._timers[key] = asyncio.get_running_loop().call_later(delay, self._due, key)

    def look_again_soon(self, key: Key, delay: float) -> None:
        """Reconcile ``key`` within ``delay``: keeps a timer already due by then, else brings it forward."""
        timer = self._timers.get(key)
        if timer is None or timer.when() > asyncio.get_running_loop().time() + delay:
            self.look_again(key, delay)

    def _due(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.queue.add(key)

    async def reconcile(self, key: Key) -> float | None:
        """Reconcile one key; returns when to look again (None: only on change)."""
        if key[0] == "config":
            return await self.reconcile_config()
        if key[0] == "node":
            return await self.reconcile_node_state(key[1])
        return await self.reconcile_workload(key[1], key[2])

    # ---------------------------------------------------------------- shared lookups

    async def _config(self) -> tuple[dict[str, Any], RmdConfigSpec] | None:
        try:
            body = _plain(await self.client.get(RmdConfig, CONFIG_NAME, namespace=self.cfg.namespace))
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise
        return body, parse(RmdConfigSpec, body.get("spec"))

    async def _nodes(self) -> tuple[list[rc.NodeInfo], dict[str, list[str]]]:
        """Every node and its addresses, as last listed (listed now only before the first list)."""
        if not self.node_cache:
            await self._list_nodes()
        cached = sorted(self.node_cache.values(), key=lambda c: c[0].name)
        return [info for info, _ in cached], {info.name: addrs for info, addrs in cached}

    async def _list_nodes(self) -> None:
        """List every node (each RmdConfig reconcile); re-queue the workloads when labels changed.

        Nodes are listed, not watched: a watch delivers every status heartbeat of every node, and those
        events were most of the operator's idle CPU, for labels that rarely change. A label change reaches
        the workloads within ``config_resync_s``.
        """
        listed: dict[str, tuple[rc.NodeInfo, list[str]]] = {}
        async for node in self.client.list(Node):
            meta = node.metadata
            assert meta is not None and meta.name is not None
            addrs = (node.status.addresses if node.status else None) or []
            info = rc.NodeInfo(meta.name, dict(meta.labels or {}), meta.uid or "")
            listed[meta.name] = (info, [a.address for a in addrs])
        before = {name: info.labels for name, (info, _) in self.node_cache.items()}
        after = {name: info.labels for name, (info, _) in listed.items()}
        self.node_cache = listed
        if before and before != after:  # selectors may now match other nodes
            for key in list(self.workload_status):
                self.queue.add(("workload", *key))

    async def _rmd_pods(self, nodes: Sequence[rc.NodeInfo]) -> list[dict[str, Any]]:
        """The RMD pods, listed once per reconcile, unless every node has an address override."""
        if all(n.name in self.cfg.endpoints for n in nodes):
            return []
        pods = self.client.list(Pod, namespace=self.cfg.namespace, labels=dict(rc.RMD_POD_LABELS))
        return [_plain(p) async for p in pods]

    def _rmd_client(
        self, node: rc.NodeInfo, addresses: Sequence[str], pods: Sequence[Mapping[str, Any]]
    ) -> RmdClient:
        url = self.cfg.endpoints.get(node.name)
        if url is None:
            url = self.cfg.transport.base_url(rc.rmd_host(node, addresses, pods))
        return RmdClient(self.session, self.cfg.transport, url)

    async def _view(
        self,
        node: rc.NodeInfo,
        addresses: Sequence[str],
        want_cpus: bool,
        pods: Sequence[Mapping[str, Any]],
    ) -> tuple[rc.NodeView, RmdClient | None]:
        try:
            rmd = self._rmd_client(node, addresses, pods)
            workloads = await rmd.get_workloads()
            cpus = host_cpus(await rmd.get_cache_l3()) if want_cpus else None
        except (LookupError, RmdCallError, ValueError) as exc:
            return rc.NodeView(node.name, None, error=str(exc)), None
        return rc.NodeView(node.name, tuple(workloads), cpus), rmd

    async def _set_status(
        self, res: Any, name: str, namespace: str, body: Mapping[str, Any], status: Any
    ) -> None:
        if body.get("status") == status:
            return
        patch = [{"op": "add", "path": "/status", "value": status}]
        await self.client.patch(res.Status, name, patch, namespace=namespace, patch_type=PatchType.JSON)

    # ---------------------------------------------------------------- RmdConfig

    async def reconcile_config(self) -> float | None:
        found = await self._config()
        if found is None:
            return None
        body, spec = found
        meta = body["metadata"]
        owner = {"name": meta["name"], "uid": meta["uid"]}
        server_tls, rotation_delay = await self._certificates()
        await self._list_nodes()
        nodes, _ = await self._nodes()
        if self.node_states:  # the watch's copy; listed only until it has shown one
            states = [str((b.get("metadata") or {}).get("name")) for b in self.node_states.values()]
        else:
            states = [
                _plain(s)["metadata"]["name"]
                async for s in self.client.list(RmdNodeState, namespace=self.cfg.namespace)
            ]
        plan = rc.plan_config(spec, owner, self.cfg.namespace, nodes, states, self.cfg.node_image, server_tls)
        for ds in plan.daemonsets:
            await self.client.patch(
                DaemonSet,
                ds["metadata"]["name"],
                ds,
                namespace=self.cfg.namespace,
                patch_type=PatchType.APPLY,
                field_manager=FIELD_MANAGER,
                force=True,
            )
        if plan.delete_agent:
            with contextlib.suppress(Exception):
                await self.client.delete(DaemonSet, rc.AGENT_DAEMONSET, namespace=self.cfg.namespace)
        for state in plan.create_node_states:
            try:
                await self.client.create(RmdNodeState.from_dict(state))
            except Exception as exc:
                if not is_status(exc, 409):
                    raise
        for name in plan.delete_node_states:
            with contextlib.suppress(Exception):
                await self.client.delete(RmdNodeState, name, namespace=self.cfg.namespace)
        if (body.get("status") or {}).get("nodes") != plan.status["nodes"]:
            await self._set_status(RmdConfig, CONFIG_NAME, self.cfg.namespace, body, plan.status)
            await self._requeue_workloads()  # the set of RMD nodes changed: selectors may target others now
        for node in plan.status["nodes"]:
            if node not in self.node_states:  # known node states keep their own schedule
                self.queue.add(("node", node))
        if rotation_delay is not None:
            return min(self.cfg.config_resync_s, rotation_delay)
        return self.cfg.config_resync_s

    # ---------------------------------------------------------------- certificates

    async def _secret(self, name: str) -> Any:
        try:
            return await self.client.get(Secret, name, namespace=self.cfg.namespace)
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise

    async def _certificates(self) -> tuple[str, float | None]:
        """Take the rotation step that is due; return the digest of RMD's start-time TLS material (for its
        pod template) and when to look again for the rotation (None: the usual period)."""
        server = await self._secret(rc.RMD_SERVER_SECRET)
        if server is None:
            return "", None
        client = await self._secret(rc.RMD_CLIENT_SECRET) if self.cfg.rotate_certs else None
        tls = rotation.Tls(_secret_data(server), _secret_data(client) if client is not None else {})
        digest = rotation.server_material(tls.server)
        if client is None:
            return digest, None
        annotations = dict((client.metadata and client.metadata.annotations) or {})
        step_at = annotations.get(rotation.STEP_AT_ANNOTATION)
        try:
            decision = rotation.next_step(
                tls,
                dt.datetime.now(dt.UTC),
                rotation.phase(tls) is rotation.Phase.STEADY or await self._rmd_rolled_out(digest),
                _age_s(step_at) if step_at else float("inf"),
                self.cfg.rotation_grace_s,
                requested=rotation.ROTATE_ANNOTATION in annotations,
            )
        except rotation.RotationError as exc:
            log.error("certificates are not rotated: %s", exc)
            return digest, None
        if decision.step is None:
            if decision.reason:
                log.info("certificate rotation: %s", decision.reason)
            return digest, decision.look_again_s
        new = None
        if decision.step is rotation.Step.TRUST:
            new = rotation.issue(tls, self.cfg.cert_validity)
        after = rotation.apply(decision.step, tls, new)
        log.info("certificate rotation, step %s: %s", decision.step.value, decision.reason)
        # The server Secret first: a step repeated after a failure here rebuilds from what is in use.
        await self._replace_secret(server, after.server, {})
        annotations.pop(rotation.ROTATE_ANNOTATION, None)
        annotations[rotation.STEP_AT_ANNOTATION] = _now()
        await self._replace_secret(client, after.client, annotations)
        return rotation.server_material(after.server), rotation.ROLLOUT_CHECK_S

    async def _replace_secret(
        self, secret: Any, data: Mapping[str, bytes], annotations: Mapping[str, str] | None
    ) -> None:
        secret.data = {k: base64.b64encode(v).decode() for k, v in data.items()}
        secret.stringData = None
        if annotations:
            secret.metadata.annotations = dict(annotations)
        await self.client.replace(secret)  # carries resourceVersion: a concurrent change makes it fail

    async def _rmd_rolled_out(self, digest: str) -> bool:
        """Every RMD pod runs ``digest`` (the rolling update is complete), or there is no RMD DaemonSet."""
        try:
            ds = _plain(await self.client.get(DaemonSet, rc.RMD_DAEMONSET, namespace=self.cfg.namespace))
        except Exception as exc:
            if is_status(exc, 404):
                return True
            raise
        return rc.rolled_out(ds, digest)

    async def _requeue_workloads(self) -> None:
        async for w in self.client.list(RmdWorkload, namespace="*"):
            meta = _plain(w)["metadata"]
            self.queue.add(("workload", meta["namespace"], meta["name"]))

    # ---------------------------------------------------------------- RmdNodeState

    async def reconcile_node_state(self, node_name: str) -> float | None:
        name = rc.node_state_name(node_name)
        cached = self.node_states.get(node_name)
        if cached is not None:
            body: Mapping[str, Any] = cached
        else:
            try:
                body = _plain(await self.client.get(RmdNodeState, name, namespace=self.cfg.namespace))
            except Exception as exc:
                if is_status(exc, 404):
                    return None
                raise
        node = rc.NodeInfo(node_name, {})
        addresses: list[str] = []
        pods = await self._rmd_pods([node])
        if pods and node_name in self.node_cache:  # only needed to find the RMD pod by host IP
            addresses = self.node_cache[node_name][1]
        elif pods:
            with contextlib.suppress(Exception):
                found = await self.client.get(Node, node_name)
                addresses = [a.address for a in (found.status.addresses if found.status else None) or []]
        view, rmd = await self._view(node, addresses, False, pods)
        prev_sync = str((body.get("status") or {}).get("lastSync") or "")
        status = rc.node_state_status(
            body.get("status"),
            view.workloads,
            view.error,
            _now(),
            _age_s(prev_sync) if prev_sync else float("inf"),
        )
        await self._set_status(RmdNodeState, name, self.cfg.namespace, body, status)
        if view.workloads is not None and rmd is not None:
            crs = dict(self.workload_status)
            for wid in rc.orphans(view.workloads, frozenset(crs)):
                uuid = next(str(w.get("uuid")) for w in view.workloads if str(w.get("id")) == wid)
                if await self._cr_exists(uuid):
                    continue  # the watch has not shown it yet
                log.info(
                    "removing workload %s (%s) from RMD on %s: its RmdWorkload is gone", wid, uuid, node_name
                )
                with contextlib.suppress(RmdCallError):
                    await rmd.delete_workload(wid)
            for ns, wname in rc.needs_reconcile(view.workloads, node_name, crs):
                self.queue.add(("workload", ns, wname))
        return self.cfg.retry_s if view.workloads is None else self.cfg.node_state_period_s

    async def _cr_exists(self, uuid: str) -> bool:
        namespace, _, name = uuid.partition("/")
        try:
            await self.client.get(RmdWorkload, name, namespace=namespace)
        except Exception as exc:
            if is_status(exc, 404):
                return False
            raise
        return True

    # ---------------------------------------------------------------- RmdWorkload

    async def _execute(
        self, action: rc.NodeAction, rmd: RmdClient | None, previous: Mapping[str, Any]
    ) -> rc.NodeResult:
        node = action.node
        prev_response = str((previous.get(node) or {}).get("response") or "Success: 200")
        if action.act is rc.Act.UNREACHABLE or rmd is None:
            return rc.NodeResult(node, f"Fail: RMD unreachable: {action.error}", None)
        if action.act is rc.Act.GONE:
            return rc.NodeResult(node, "", None, removed=True)
        if action.act is rc.Act.KEEP:
            return rc.NodeResult(node, prev_response, action.existing)
        payload = dict(action.payload or {})
        try:
            if action.act is rc.Act.DELETE:
                await rmd.delete_workload(action.workload_id)
                return rc.NodeResult(node, "Success: 200", None, removed=True)
            if action.act is rc.Act.UPDATE:
                return rc.NodeResult(
                    node, "Success: 200", await rmd.patch_workload(action.workload_id, payload)
                )
            if action.act is rc.Act.REPLACE:
                await rmd.delete_workload(action.workload_id)
            return rc.NodeResult(node, "Success: 201", await rmd.post_workload(payload))
        except RmdApiError as err:
            return rc.NodeResult(
                node,
                f"Fail: {err.text.strip()}",
                None if action.act is not rc.Act.DELETE else action.existing,
            )
        except RmdUnreachable as err:
            return rc.NodeResult(node, f"Fail: RMD unreachable: {err}", action.existing)

    async def reconcile_workload(self, namespace: str, name: str) -> float | None:
        try:
            body = _plain(await self.client.get(RmdWorkload, name, namespace=namespace))
        except Exception as exc:
            if is_status(exc, 404):
                return None
            raise
        meta = body["metadata"]
        status = body.get("status") or {}
        generation = meta.get("generation")
        uuid = workload_uuid(namespace, name)
        deleting = bool(meta.get("deletionTimestamp"))
        finalizers = list(meta.get("finalizers") or [])
        if deleting and rc.FINALIZER not in finalizers:
            return None
        if not deleting and rc.FINALIZER not in finalizers:
            patch = {"metadata": {"finalizers": [*finalizers, rc.FINALIZER]}}
            await self.client.patch(RmdWorkload, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
        spec: RmdWorkloadSpec | None = None
        if not deleting:
            try:
                spec = parse(RmdWorkloadSpec, body.get("spec"))
            except SpecError as exc:
                await self._set_status(
                    RmdWorkload, name, namespace, body, rc.invalid_status(str(exc), generation)
                )
                return None
        found = await self._config()
        if found is None:
            if deleting:
                await self._drop_finalizer(name, namespace, finalizers)
                return None
            message = f"no RmdConfig {self.cfg.namespace}/{CONFIG_NAME}: RMD is not deployed"
            await self._set_status(RmdWorkload, name, namespace, body, rc.invalid_status(message, generation))
            return self.cfg.retry_s
        nodes, addresses = await self._nodes()
        selector = rc.rmd_selector(found[1])
        rmd_nodes = [n for n in nodes if rc.selects(selector, n.labels)]
        wanted, missing = rc.targets(spec, nodes, frozenset(n.name for n in rmd_nodes)) if spec else ((), ())
        want_cpus = spec is not None and spec.all_cores
        previous = status.get("workloadStates") or {}
        # Only the RMDs that should or may hold it are read: targets, where the status placed it, and where
        # the node states (every RMD's list) last saw it. Reading every RMD per workload was the idle cost.
        relevant = {*wanted, *previous, *rc.nodes_holding(uuid, self.node_states.values())}
        read = [n for n in rmd_nodes if n.name in relevant]
        pods = await self._rmd_pods(read)
        fetched = await asyncio.gather(
            *(self._view(n, addresses.get(n.name, []), want_cpus and n.name in wanted, pods) for n in read)
        )
        views = [v for v, _ in fetched]
        clients = {v.node: c for v, c in fetched}
        actions = rc.plan_workload(spec, uuid, wanted, views)
        results = await asyncio.gather(*(self._execute(a, clients.get(a.node), previous) for a in actions))
        for a in actions:
            if a.act in rc.CHANGES_RMD or a.act is rc.Act.UNREACHABLE:
                # Its node state shows the change, or that RMD is unreadable, seconds later rather than a
                # period later; a burst of changes is read once.
                self.look_again_soon(("node", a.node), self.cfg.node_state_settle_s)
        failed = [r.node for r in results if r.response.startswith("Fail")]
        if deleting:
            failed_deletes = [
                r.node
                for r, a in zip(results, actions, strict=True)
                if a.act is rc.Act.DELETE and not r.removed
            ]
            waited = _age_s(str(meta.get("deletionTimestamp")))
            if rc.cleanup_done(actions, failed_deletes, waited, self.cfg.cleanup_grace_s):
                await self._drop_finalizer(name, namespace, finalizers)
                return None
            new = rc.workload_status(status, [], [], results, generation)
            await self._set_status(RmdWorkload, name, namespace, body, new)
            return self.cfg.retry_s
        new = rc.workload_status(status, wanted, missing, results, generation)
        await self._set_status(RmdWorkload, name, namespace, body, new)
        return self.cfg.retry_s if failed or missing else self.cfg.workload_resync_s

    async def _drop_finalizer(self, name: str, namespace: str, finalizers: list[str]) -> None:
        rest = [f for f in finalizers if f != rc.FINALIZER]
        patch = {"metadata": {"finalizers": rest or None}}
        with contextlib.suppress(Exception):
            await self.client.patch(RmdWorkload, name, patch, namespace=namespace, patch_type=PatchType.MERGE)


# -------------------------------------------------------------------- command line


def _endpoint(text: str) -> tuple[str, str]:
    node, sep, url = text.partition("=")
    if not sep or not node or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NODE=https://HOST:PORT")
    return node, url


TLS_CHECK_S: Final = 60.0  # how often the mounted client Secret is compared with what is loaded


def build_transport(
    tls_dir: Path | None, plain: bool, timeout_s: float
) -> tuple[Transport, TlsReloader | None]:
    """mTLS from ``tls_dir`` (a mounted Secret, reloaded when it changes); plain HTTP only with the explicit
    debug flag."""
    if plain:
        return Transport(None, allow_plain_http=True, timeout_s=timeout_s), None
    if tls_dir is None:
        raise TlsConfigError("--tls-dir is required (RMD is reached over mutual TLS)")
    reloader = TlsReloader.start(tls_dir)
    return Transport(reloader.context, timeout_s=timeout_s), reloader


async def _keep_tls_current(reloader: TlsReloader, period_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        reloader.check()


def parser() -> argparse.ArgumentParser:
    p = GoFlagParser(prog="intel-rmd-operator", description="Operator for Intel RMD.")
    p.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or os.environ.get("WATCH_NAMESPACE") or "default",
    )
    p.add_argument("--tls-dir", type=Path, default=Path("/etc/rmd-tls"), help="ca.crt, tls.crt, tls.key")
    p.add_argument(
        "--insecure-plain-http",
        action="store_true",
        help="DEBUG ONLY: reach RMD over plain HTTP without authentication (RMD's -d mode)",
    )
    p.add_argument("--rmd-endpoint", type=_endpoint, action="append", default=[], metavar="NODE=URL")
    p.add_argument("--rmd-timeout", type=float, default=10.0)
    p.add_argument(
        "--workload-resync",
        type=float,
        default=300.0,
        help="seconds between checks of each enforced workload",
    )
    p.add_argument(
        "--node-state-period", type=float, default=300.0, help="seconds between reads of each RMD when idle"
    )
    p.add_argument("--cleanup-grace", type=float, default=120.0)
    p.add_argument(
        "--config-resync",
        type=float,
        default=30.0,
        help="seconds between RmdConfig reconciles, which list the nodes (label changes take this long)",
    )
    p.add_argument(
        "--tls-reload-period", type=float, default=TLS_CHECK_S, help="seconds between checks of --tls-dir"
    )
    p.add_argument(
        "--no-cert-rotation",
        action="store_true",
        help="leave the RMD TLS Secrets alone (they are renewed by other means)",
    )
    p.add_argument("--cert-days", type=int, default=90, help="validity of the certificates a rotation issues")
    p.add_argument(
        "--cert-rotation-grace",
        type=float,
        default=300.0,
        help="seconds between rotation steps, for every client to load the previous one",
    )
    p.add_argument("--no-leader-elect", action="store_true")
    p.add_argument(
        "--node-image",
        default=os.environ.get(images.NODE_IMAGE_ENV) or images.default_node_image(),
        help=f"image of the node agent and device plugin (env {images.NODE_IMAGE_ENV})",
    )
    add_verbosity_flag(p)
    return p


async def amain(args: argparse.Namespace) -> int:
    transport, reloader = build_transport(args.tls_dir, args.insecure_plain_http, args.rmd_timeout)
    tls_task = (
        asyncio.create_task(_keep_tls_current(reloader, args.tls_reload_period))
        if reloader is not None
        else None
    )
    try:
        return await _run(args, transport)
    finally:
        if tls_task is not None:
            tls_task.cancel()


async def _run(args: argparse.Namespace, transport: Transport) -> int:
    cfg = OperatorConfig(
        namespace=args.namespace,
        transport=transport,
        endpoints=dict(args.rmd_endpoint),
        workload_resync_s=args.workload_resync,
        node_state_period_s=args.node_state_period,
        cleanup_grace_s=args.cleanup_grace,
        config_resync_s=args.config_resync,
        rotate_certs=not args.no_cert_rotation,
        cert_validity=dt.timedelta(days=args.cert_days),
        rotation_grace_s=args.cert_rotation_grace,
        node_image=args.node_image,
    )
    client = AsyncClient(field_manager=FIELD_MANAGER)
    # Connections to the RMDs outlive the period between reads, so an idle read needs no new handshake.
    connector = aiohttp.TCPConnector(keepalive_timeout=cfg.node_state_period_s + 30, limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        operator = RmdOperator(client, session, cfg)
        if args.no_leader_elect:
            await operator.run()
            return 0
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
        elector = LeaderElector(
            client, ElectionConfig(namespace=args.namespace, identity=identity, name=LEASE_NAME)
        )
        while True:
            await elector.run(operator.run)
            log.error("leadership lost; campaigning again")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.verbosity)
    try:
        return asyncio.run(amain(args))
    except TlsConfigError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
