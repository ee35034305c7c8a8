"""The operator's real watch and lightkube wiring against a small in-process HTTP API server.

This is no substitute for the real control plane (no admission, no controllers, simplified apply), but it
runs the same code paths over HTTP: discovery, list and watch streams, server-side apply of the DaemonSet,
pod listing, status merge patches and events. It catches wiring mistakes before the harness is there.
Its error bodies say ``application/json; charset=utf-8`` on purpose: the operator must recognise a 404
even when the client library does not turn it into its own error type.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.operator.combined import COMBINED_NAME
from intel_device_plugins.operator.controller import ControllerConfig, run_controllers
from intel_device_plugins.operator.daemonset import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, GROUP, DeviceKind
from k8stest.ports import reserved_ports
from tests.builders import merge_patch

NS = "plugins"


def _resource(name: str, kind: str, namespaced: bool) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": kind.lower(),
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    }


DISCOVERY: dict[str, Any] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            _resource("pods", "Pod", True),
            _resource("events", "Event", True),
            _resource("secrets", "Secret", True),
            _resource("namespaces", "Namespace", False),
        ],
    },
    "/apis": {
        "kind": "APIGroupList",
        "groups": [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
            }
            for g, v in (
                ("apps", "v1"),
                (GROUP, "v1"),
                ("coordination.k8s.io", "v1"),
                ("apiextensions.k8s.io", "v1"),
            )
        ],
    },
    "/apis/apiextensions.k8s.io/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apiextensions.k8s.io/v1",
        "resources": [_resource("customresourcedefinitions", "CustomResourceDefinition", False)],
    },
    "/apis/apps/v1": {
        "kind": "APIResourceList",
        "groupVersion": "apps/v1",
        "resources": [_resource("daemonsets", "DaemonSet", True)],
    },
    "/apis/coordination.k8s.io/v1": {
        "kind": "APIResourceList",
        "groupVersion": "coordination.k8s.io/v1",
        "resources": [_resource("leases", "Lease", True)],
    },
    f"/apis/{GROUP}/v1": {
        "kind": "APIResourceList",
        "groupVersion": f"{GROUP}/v1",
        "resources": [
            r
            for k in ALL_KINDS
            for r in (
                _resource(k.plural, k.kind, False),
                {**_resource(f"{k.plural}/status", k.kind, False), "verbs": ["get", "patch"]},
            )
        ],
    },
}


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The add/replace/test subset of RFC 6902 that the operator sends."""
    out = copy.deepcopy(target)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].strip("/").split("/")]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if op["op"] == "test":
            current = node[int(last)] if isinstance(node, list) else node.get(last)
            assert current == op["value"]
        elif isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            node[last] = op["value"]
    return out


class FakeApiServer:
    """Objects by (api prefix, plural, namespace, name); watch streams by (prefix, plural, namespace)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.watchers: list[tuple[tuple[str, str, str], asyncio.Queue[dict[str, Any]]]] = []
        self.rv = itertools.count(1)
        self.uids = itertools.count(1)
        self.requests: list[tuple[str, str]] = []

    # -- object store -------------------------------------------------------------------------------------
    def put(self, key: tuple[str, str, str, str], obj: dict[str, Any], event: str) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self.uids)}")
        meta["resourceVersion"] = str(next(self.rv))
        if "spec" in obj:
            # As a real API server: generation 1 on creation, one more on each change of the spec. The
            # operator needs it to see a DaemonSet as rolled out (observedGeneration == generation) and as
            # still holding what it applied; without it every reconcile looks unsettled and applies again.
            old = self.objects.get(key)
            generation = (old or {}).get("metadata", {}).get("generation")
            if old is None or not isinstance(generation, int):
                meta["generation"] = 1
            else:
                meta["generation"] = generation + (old.get("spec") != obj["spec"])
        self.objects[key] = obj
        self.notify(key, event, obj)
        return obj

    def delete(self, key: tuple[str, str, str, str]) -> None:
        obj = self.objects.pop(key)
        self.notify(key, "DELETED", obj)

    def notify(self, key: tuple[str, str, str, str], event: str, obj: dict[str, Any]) -> None:
        for (prefix, plural, ns), queue in self.watchers:
            if (prefix, plural) == key[:2] and ns in ("", key[2]):
                queue.put_nowait({"type": event, "object": copy.deepcopy(obj)})

    # -- HTTP ---------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        self.requests.append((request.method, path))
        if path == "/version":
            return web.json_response({"major": "1", "minor": "33", "gitVersion": "v1.33.0"})
        if path in DISCOVERY:
            return web.json_response(DISCOVERY[path])
        parts = path.strip("/").split("/")
        prefix = "/".join(parts[:2]) if parts[0] == "api" else "/".join(parts[:3])
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        ns = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
        if not name:
            if request.method == "POST":
                body = await request.json()
                meta = body.setdefault("metadata", {})
                meta.setdefault("name", meta.get("generateName", "x") + str(next(self.uids)))
                if (prefix, plural, ns, meta["name"]) in self.objects:
                    return self.error(409, "AlreadyExists", f"{plural} {meta['name']!r} already exists")
                return web.json_response(
                    self.put((prefix, plural, ns, meta["name"]), body, "ADDED"), status=201
                )
            if request.query.get("watch") in ("true", "1"):
                return await self.watch(request, (prefix, plural, ns))
            return web.json_response(self.list(prefix, plural, ns, request.query.get("labelSelector", "")))
        key = (prefix, plural, ns, name)
        if request.method == "GET":
            if key not in self.objects:
                return self.not_found(name)
            return web.json_response(self.objects[key])
        if request.method == "PATCH":
            body = yaml.safe_load(await request.text())
            ctype = request.content_type
            if ctype == "application/apply-patch+yaml":
                current = self.objects.get(key, {})
                applied = {
                    **body,
                    "metadata": {**body["metadata"], "uid": current.get("metadata", {}).get("uid")},
                }
                if "status" in current:
                    applied["status"] = current["status"]
                if (
                    current
                    and {k: v for k, v in current.items() if k != "metadata"}
                    == {k: v for k, v in applied.items() if k != "metadata"}
                    and current["metadata"].get("labels") == applied["metadata"].get("labels")
                ):
                    return web.json_response(current)  # a no-op apply changes nothing, as on a real server
                if applied["metadata"]["uid"] is None:
                    del applied["metadata"]["uid"]
                return web.json_response(self.put(key, applied, "MODIFIED" if current else "ADDED"))
            if key not in self.objects:
                return self.not_found(name)
            if ctype == "application/json-patch+json":
                try:
                    patched = json_patch(self.objects[key], body)
                except AssertionError:
                    return self.error(422, "Invalid", "test operation failed")
                return web.json_response(self.put(key, patched, "MODIFIED"))
            assert ctype == "application/merge-patch+json" and sub == "status", (ctype, sub)
            return web.json_response(self.put(key, merge_patch(self.objects[key], body), "MODIFIED"))
        if request.method == "PUT":
            body = await request.json()
            if key not in self.objects:
                return self.not_found(name)
            if body["metadata"].get("resourceVersion") != self.objects[key]["metadata"]["resourceVersion"]:
                return self.error(409, "Conflict", "the object has been modified")
            body["metadata"]["uid"] = self.objects[key]["metadata"]["uid"]
            return web.json_response(self.put(key, body, "MODIFIED"))
        if request.method == "DELETE":
            if key not in self.objects:
                return self.not_found(name)
            self.delete(key)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
        return web.json_response({"kind": "Status", "code": 405}, status=405)

    def list(self, prefix: str, plural: str, ns: str, selector: str) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        items = [
            o
            for (p, pl, n, _), o in self.objects.items()
            if (p, pl) == (prefix, plural)
            and ns in ("", n)
            and all(o.get("metadata", {}).get("labels", {}).get(k) == v for k, v in wanted.items())
        ]
        return {
            "kind": "List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(next(self.rv))},
            "items": items,
        }

    async def watch(self, request: web.Request, key: tuple[str, str, str]) -> web.StreamResponse:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        entry = (key, queue)
        self.watchers.append(entry)
        if not request.query.get("resourceVersion"):
            # A watch without a version starts, on a real API server, with an ADDED event for every object
            # there is: what changed between a client's list and its watch is not lost.
            fields = request.query.get("fieldSelector", "")
            name = fields.removeprefix("metadata.name=") if fields.startswith("metadata.name=") else ""
            for obj in self.list(*key, request.query.get("labelSelector", ""))["items"]:
                if not name or obj["metadata"]["name"] == name:
                    queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(obj)})
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        try:
            while True:
                event = await queue.get()
                await resp.write(json.dumps(event).encode() + b"\n")
        finally:
            self.watchers.remove(entry)

    @staticmethod
    def error(code: int, reason: str, message: str) -> web.Response:
        return web.Response(
            text=json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": code,
                    "reason": reason,
                    "message": message,
                }
            ),
            status=code,
            headers={"Content-Type": "application/json"},
        )

    @staticmethod
    def not_found(name: str) -> web.Response:
        return web.json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "code": 404,
                "reason": "NotFound",
                "message": f"{name} not found",
            },
            status=404,
        )


def daemonset_pod(name: str, ds: dict[str, Any], node: str) -> dict[str, Any]:
    """A pod of DaemonSet ``ds`` on ``node``, with the DaemonSet's ``app`` label and controller reference."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ds["metadata"]["namespace"],
            "labels": {"app": ds["spec"]["selector"]["matchLabels"]["app"]},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "controller": True,
                    "name": ds["metadata"]["name"],
                    "uid": ds["metadata"]["uid"],
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
    }


def with_one_ready_pod(ds: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet as its controller reports one scheduled, ready pod."""
    counts = ("desiredNumberScheduled", "numberReady", "currentNumberScheduled")
    handled = ds["metadata"].get("generation", 1)
    status = {**dict.fromkeys(counts, 1), "numberMisscheduled": 0, "observedGeneration": handled}
    return {**ds, "status": status}


async def eventually(probe: Callable[[], Any], limit_s: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + limit_s
    while asyncio.get_running_loop().time() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached in time")


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    try:
        yield server
    finally:
        for _, queue in list(server.watchers):
            queue.put_nowait({"type": "BOOKMARK", "object": {}})
        await runner.cleanup()


CR_PREFIX = f"apis/{GROUP}/v1"
DS_PREFIX = "apis/apps/v1"


async def test_operator_end_to_end_over_http(cluster: FakeApiServer) -> None:
    gpu = DeviceKind.GPU
    cr_key = (CR_PREFIX, gpu.plural, "", "a")
    ds_key = (DS_PREFIX, "daemonsets", NS, "intel-gpu-plugin-a")
    cluster.put(
        cr_key,
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": gpu.kind,
            "metadata": {"name": "a"},
            "spec": {"image": node_image(), "sharedDevNum": 3},
        },
        "ADDED",
    )
    metrics = Metrics()
    task = asyncio.create_task(run_controllers(ControllerConfig(NS, (gpu,), {}), metrics))
    try:
        ds = await eventually(lambda: cluster.objects.get(ds_key))
        assert ds["metadata"]["ownerReferences"][0]["name"] == "a"
        assert ("PATCH", f"/{DS_PREFIX}/namespaces/{NS}/daemonsets/intel-gpu-plugin-a") in cluster.requests
        # the DaemonSet controller's first write (no nodes yet) brings the CR's first status
        counts = ("desiredNumberScheduled", "numberReady", "currentNumberScheduled", "numberMisscheduled")
        handled = {**dict.fromkeys(counts, 0), "observedGeneration": ds["metadata"].get("generation", 1)}
        cluster.put(ds_key, {**ds, "status": handled}, "MODIFIED")
        status = await eventually(lambda: cluster.objects[cr_key].get("status"))
        assert status["controlledDaemonSet"]["name"] == "intel-gpu-plugin-a"

        # the spec changes: the DaemonSet follows through the CR watch
        cr = copy.deepcopy(cluster.objects[cr_key])
        cr["spec"]["sharedDevNum"] = 7
        cluster.put(cr_key, cr, "MODIFIED")
        await eventually(
            lambda: "7" in cluster.objects[ds_key]["spec"]["template"]["spec"]["containers"][0]["args"]
        )

        # a hand edit is reverted and a hand deletion repaired, through the DaemonSet watch
        edited = copy.deepcopy(cluster.objects[ds_key])
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = "evil/image:1.0.0"
        cluster.put(ds_key, edited, "MODIFIED")
        await eventually(
            lambda: (
                cluster.objects[ds_key]["spec"]["template"]["spec"]["containers"][0]["image"] == node_image()
            )
        )
        cluster.delete(ds_key)
        await eventually(lambda: ds_key in cluster.objects)

        # the DaemonSet's status and pods reach the CR's status
        ds = copy.deepcopy(cluster.objects[ds_key])
        cluster.put(("api/v1", "pods", NS, "p1"), daemonset_pod("p1", ds, "node-1"), "ADDED")
        cluster.put(ds_key, with_one_ready_pod(ds), "MODIFIED")
        await eventually(
            lambda: (
                cluster.objects[cr_key]["status"].get("nodeNames") == ["node-1"]
                and cluster.objects[cr_key]["status"]["numberReady"] == 1
            )
        )

        # an idle operator writes nothing: whatever reconciles it after the status converged (a recheck left
        # from the rollout, the echo of its own status write, or the unchanged objects written again below)
        # must neither apply the DaemonSet nor patch the status. Two nudges, each waited for, make sure a
        # reconcile that began after convergence has also finished: the single worker starts the next
        # reconcile only then, so every write of the first is already in the request log.
        def reconciled_since(count: int) -> bool:
            return metrics.reconciles > count

        before = len(cluster.requests)
        for key in (cr_key, ds_key):
            started = metrics.reconciles
            cluster.put(key, cluster.objects[key], "MODIFIED")
            await eventually(functools.partial(reconciled_since, started))
        writes = [r for r in cluster.requests[before:] if r[0] in ("PATCH", "POST", "PUT")]
        assert writes == []
        assert metrics.reconcile_errors == 0

        # the CR goes away: no error loop
        cluster.delete(cr_key)
        await asyncio.sleep(0.5)
        assert metrics.reconcile_errors == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_combined_mode_over_http(cluster: FakeApiServer) -> None:
    """One DaemonSet for a GPU and a QAT CR; a per-kind DaemonSet left from before is deleted; statuses."""
    kinds = (DeviceKind.GPU, DeviceKind.QAT)
    keys = {k: (CR_PREFIX, k.plural, "", f"{k.value}-cr") for k in kinds}
    for kind, key in keys.items():
        cluster.put(
            key,
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": kind.kind,
                "metadata": {"name": key[3]},
                "spec": {"image": f"intel/intel-{kind.value}-plugin:0.36.0", "logLevel": 2},
            },
            "ADDED",
        )
    leftover = (DS_PREFIX, "daemonsets", NS, "intel-gpu-plugin-old")
    cluster.put(
        leftover,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "intel-gpu-plugin-old",
                "namespace": NS,
                "labels": {"app": "intel-gpu-plugin", MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            },
            "spec": {
                "selector": {"matchLabels": {"app": "intel-gpu-plugin"}},
                "template": {"spec": {"containers": [{"name": "c"}]}},
            },
        },
        "ADDED",
    )
    ds_key = (DS_PREFIX, "daemonsets", NS, COMBINED_NAME)
    metrics = Metrics()
    task = asyncio.create_task(run_controllers(ControllerConfig(NS, kinds, {}, combined=True), metrics))
    try:
        ds = await eventually(lambda: cluster.objects.get(ds_key))
        assert leftover not in cluster.objects
        assert sorted(r["name"] for r in ds["metadata"]["ownerReferences"]) == ["gpu-cr", "qat-cr"]
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:2] == ["-v", "2"] and [a.split()[0] for a in args[3::2]] == ["gpu", "qat"]
        cluster.put(("api/v1", "pods", NS, "p1"), daemonset_pod("p1", ds, "node-1"), "ADDED")
        ds = copy.deepcopy(cluster.objects[ds_key])
        cluster.put(ds_key, with_one_ready_pod(ds), "MODIFIED")

        def listed_on_node_1(key: tuple[str, str, str, str]) -> bool:
            status = cluster.objects[key].get("status") or {}
            return status.get("nodeNames") == ["node-1"] and status.get("numberReady") == 1

        for key in keys.values():
            await eventually(functools.partial(listed_on_node_1, key))
            status = cluster.objects[key]["status"]
            assert status["controlledDaemonSet"]["name"] == COMBINED_NAME and status["numberReady"] == 1

        # a spec change of one CR reaches the one DaemonSet
        cr = copy.deepcopy(cluster.objects[keys[DeviceKind.QAT]])
        cr["spec"]["maxNumDevices"] = 5
        cluster.put(keys[DeviceKind.QAT], cr, "MODIFIED")
        await eventually(
            lambda: any(
                "-max-num-devices 5" in a
                for a in cluster.objects[ds_key]["spec"]["template"]["spec"]["containers"][0]["args"]
            )
        )
        assert metrics.reconcile_errors == 0
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_leader_election_over_http(cluster: FakeApiServer) -> None:
    from lightkube import AsyncClient

    from intel_device_plugins.kube.leader import ElectionConfig, LeaderElector

    def elector(name: str) -> LeaderElector:
        cfg = ElectionConfig(NS, name, lease_duration_s=1, renew_deadline_s=0.8, retry_period_s=0.1)
        return LeaderElector(AsyncClient(), cfg)

    a, b = elector("a"), elector("b")
    a_stop, b_leads = asyncio.Event(), asyncio.Event()

    async def lead_a() -> None:
        await a_stop.wait()

    async def lead_b() -> None:
        b_leads.set()
        await asyncio.Event().wait()

    ta = asyncio.create_task(a.run(lead_a))
    await eventually(lambda: a.is_leader)
    tb = asyncio.create_task(b.run(lead_b))
    await asyncio.sleep(0.5)
    lease = cluster.objects[("apis/coordination.k8s.io/v1", "leases", NS, "d1c7b6d5.intel.com")]
    assert lease["spec"]["holderIdentity"] == "a" and not b.is_leader
    assert lease["spec"]["renewTime"].endswith("Z")
    a_stop.set()
    await ta
    await asyncio.wait_for(b_leads.wait(), 2)
    assert (
        cluster.objects[("apis/coordination.k8s.io/v1", "leases", NS, "d1c7b6d5.intel.com")]["spec"][
            "holderIdentity"
        ]
        == "b"
    )
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


async def test_self_managed_certificates_over_http(cluster: FakeApiServer, tmp_path: Path) -> None:
    import base64

    from lightkube import AsyncClient

    from intel_device_plugins.kube.certs import service_dns_names
    from intel_device_plugins.kube.selfcerts import SelfManagedCerts, SelfManagedConfig

    cluster.put(
        ("api/v1", "secrets", NS, "cert"),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "cert", "namespace": NS},
            "type": "Opaque",
        },
        "ADDED",
    )
    for plural, kind in (
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
    ):
        cluster.put(
            ("apis/admissionregistration.k8s.io/v1", plural, "", kind[:1].lower()),
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": kind[:1].lower()},
                "webhooks": [
                    {
                        "name": f"{kind[:1].lower()}.kb.io",
                        "clientConfig": {},
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                    }
                ],
            },
            "ADDED",
        )
    certs = SelfManagedCerts(
        AsyncClient(), SelfManagedConfig(NS, "cert", service_dns_names("svc", NS), ("m", "v"), tmp_path)
    )
    bundle = await certs.ensure()
    secret = cluster.objects[("api/v1", "secrets", NS, "cert")]
    assert base64.b64decode(secret["data"]["tls.crt"]) == bundle.tls_cert
    want = base64.b64encode(bundle.ca_bundle()).decode()
    for plural, name in (("mutatingwebhookconfigurations", "m"), ("validatingwebhookconfigurations", "v")):
        cfg = cluster.objects[("apis/admissionregistration.k8s.io/v1", plural, "", name)]
        assert cfg["webhooks"][0]["clientConfig"]["caBundle"] == want
    version = secret["metadata"]["resourceVersion"]
    assert await certs.ensure() == bundle
    assert cluster.objects[("api/v1", "secrets", NS, "cert")]["metadata"]["resourceVersion"] == version


async def test_a_running_replica_serves_a_recreated_secret_within_seconds(
    cluster: FakeApiServer, tmp_path: Path
) -> None:
    """Two replicas keep the certificate; the Secret is deleted and a restarted replica re-creates it with a
    new CA and injects that. The replica that kept running follows the Secret, so its files (which its
    server reloads on change) hold the new certificate within seconds, not at its next periodic check."""
    from lightkube import AsyncClient

    from intel_device_plugins.kube.certs import CertBundle, service_dns_names
    from intel_device_plugins.kube.selfcerts import SelfManagedCerts, SelfManagedConfig

    secret_key = ("api/v1", "secrets", NS, "cert")
    cluster.put(
        secret_key,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cert", "namespace": NS}},
        "ADDED",
    )
    cluster.put(
        ("api/v1", "secrets", NS, "unrelated"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated", "namespace": NS}},
        "ADDED",
    )
    dns = service_dns_names("svc", NS)

    def replica(name: str) -> SelfManagedCerts:
        return SelfManagedCerts(AsyncClient(), SelfManagedConfig(NS, "cert", dns, (), tmp_path / name))

    def stored() -> CertBundle | None:
        obj = cluster.objects.get(secret_key)
        return CertBundle.from_secret_data(obj.get("data")) if obj else None

    def files_of(name: str) -> bytes:
        path = tmp_path / name / "tls.crt"
        return path.read_bytes() if path.exists() else b""

    running = asyncio.create_task(replica("running").run())
    try:
        for _ in range(300):
            first = stored()
            if first is not None and files_of("running") == first.tls_cert:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the running replica never stored a certificate")
        await asyncio.sleep(0.5)  # settled: its next periodic check is minutes away
        cluster.delete(secret_key)
        restarted = await replica("restarted").ensure()  # or the running one re-created it first
        assert restarted.ca_cert != first.ca_cert
        began = time.monotonic()
        while files_of("running") != restarted.tls_cert:
            assert time.monotonic() - began < 5, "the running replica still serves the old certificate"
            await asyncio.sleep(0.05)
        assert stored() == restarted
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


@pytest.fixture
def two_ports() -> Iterator[list[int]]:
    with reserved_ports(2) as ports:
        yield ports


async def test_whole_operator_without_cert_manager(
    cluster: FakeApiServer, tmp_path: Path, two_ports: list[int]
) -> None:
    """The CLI with --leader-elect and self-managed certificates: issue, inject, serve, reconcile, release."""
    import base64
    import ssl

    import aiohttp

    from intel_device_plugins.operator import cli

    cluster.put(
        ("api/v1", "secrets", NS, "cert"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cert", "namespace": NS}},
        "ADDED",
    )
    cluster.put(
        ("apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "", "v"),
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "v"},
            "webhooks": [
                {
                    "name": "v.kb.io",
                    "clientConfig": {},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        },
        "ADDED",
    )
    cluster.put(
        (CR_PREFIX, "sgxdeviceplugins", "", "s"),
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "SgxDevicePlugin",
            "metadata": {"name": "s"},
            "spec": {"image": "intel/intel-sgx-plugin:0.36.0"},
        },
        "ADDED",
    )
    webhook_port, health_port = two_ports
    p = cli.parser()
    opts = p.parse_args(
        [
            "--leader-elect",
            "--webhook-cert-mode=self-managed",
            "--webhook-service=svc",
            "--webhook-secret=cert",
            "--webhook-configuration=v",
            f"--webhook-cert-dir={tmp_path}",
            f"--webhook-port={webhook_port}",
            f"--health-probe-bind-address=127.0.0.1:{health_port}",
            "--metrics-bind-address=0",
            "--devices=sgx",
        ]
    )
    task = asyncio.create_task(cli.amain(opts, {"DEVICEPLUGIN_NAMESPACE": NS, "POD_NAME": "op-1"}))
    lease_key = ("apis/coordination.k8s.io/v1", "leases", NS, "d1c7b6d5.intel.com")
    try:
        async with aiohttp.ClientSession() as session:

            async def ready() -> bool:
                try:
                    async with session.get(f"http://127.0.0.1:{health_port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            for _ in range(200):
                if await ready():
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("operator never became ready")
            cfg = cluster.objects[
                ("apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "", "v")
            ]
            ca = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"]).decode()
            ctx = ssl.create_default_context(cadata=ca)
            ctx.check_hostname = False  # the certificate names the Service, the test dials 127.0.0.1
            review = {
                "request": {
                    "uid": "1",
                    "operation": "CREATE",
                    "object": {"spec": {"image": "x/y:1.0.0"}},
                    "kind": {"group": GROUP, "kind": "SgxDevicePlugin"},
                }
            }
            async with session.post(
                f"https://127.0.0.1:{webhook_port}{DeviceKind.SGX.validate_path}", json=review, ssl=ctx
            ) as r:
                assert (await r.json())["response"]["allowed"] is False

        await eventually(lambda: (DS_PREFIX, "daemonsets", NS, "intel-sgx-plugin-s") in cluster.objects)
        assert cluster.objects[lease_key]["spec"]["holderIdentity"] == "op-1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert cluster.objects[lease_key]["spec"]["holderIdentity"] == ""  # released on the way out
