"""Webhook, health and metrics servers over real sockets; cert reload; self-managed certificates; CLI."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import ssl
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta, Status
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from intel_device_plugins.kube.certs import CertBundle, issue, renewal_reason, service_dns_names
from intel_device_plugins.kube.https import (
    ServingCert,
    health_app,
    metrics_app,
    parse_bind,
    start,
    webhook_app,
)
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.selfcerts import SelfManagedCerts, SelfManagedConfig, write_pair
from intel_device_plugins.operator import cli
from intel_device_plugins.operator.admission import review_handlers
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.webhooks.cli import pod_webhooks
from tests.webhooks.podfixtures import pod, with_resources
from tests.webhooks.podfixtures import review as pod_review
from tests.webhooks.tls import kubelet_volume

NOW = dt.datetime.now(dt.UTC)


def client_ctx(bundle: CertBundle) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=bundle.ca_bundle().decode())
    return ctx


def review(kind: DeviceKind, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "operation": "CREATE",
            "object": {"spec": spec},
            "kind": {"group": "deviceplugin.intel.com", "version": "v1", "kind": kind.kind},
        },
    }


async def test_webhook_server_over_tls_with_reload(tmp_path: Path) -> None:
    first = issue(None, ("localhost",), NOW)
    write_pair(tmp_path, first)
    serving = ServingCert(tmp_path)
    assert serving.reload_if_changed() and not serving.reload_if_changed()
    metrics = Metrics()
    runner = await start(webhook_app(metrics, review_handlers()), "127.0.0.1", 0, serving.context)
    port = runner.addresses[0][1]
    url = f"https://localhost:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            for kind in ALL_KINDS:
                async with s.post(
                    f"{url}{kind.validate_path}", json=review(kind, {"image": "bad"}), ssl=client_ctx(first)
                ) as r:
                    body = await r.json()
                    assert r.status == 200 and body["response"]["allowed"] is False
                    assert "spec.image" in body["response"]["status"]["message"]
                async with s.post(
                    f"{url}{kind.mutate_path}", json=review(kind, {}), ssl=client_ctx(first)
                ) as r:
                    patch = json.loads(base64.b64decode((await r.json())["response"]["patch"]))
                    assert patch[0]["path"] == "/spec/image"
            async with s.post(
                f"{url}{DeviceKind.GPU.validate_path}", data=b"{nope", ssl=client_ctx(first)
            ) as r:
                assert r.status == 400
            async with s.post(f"{url}/validate-something-else", json={}, ssl=client_ctx(first)) as r:
                assert r.status in (404, 405)
            assert metrics.admission_reviews == 16

            second = issue(None, ("localhost",), NOW)  # a rotation to a new CA
            write_pair(tmp_path, second)
            assert serving.reload_if_changed()
            async with s.post(
                f"{url}{DeviceKind.GPU.mutate_path}", json=review(DeviceKind.GPU, {}), ssl=client_ctx(second)
            ) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with s.post(
                    f"{url}{DeviceKind.GPU.mutate_path}",
                    json=review(DeviceKind.GPU, {}),
                    ssl=client_ctx(first),
                ):
                    pass
    finally:
        await runner.cleanup()


async def test_health_and_metrics() -> None:
    ready = {"v": False}
    metrics = Metrics(reconciles=7)
    health = await start(health_app(lambda: ready["v"]), "127.0.0.1", 0)
    mets = await start(metrics_app(metrics), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s:
            hp, mp = health.addresses[0][1], mets.addresses[0][1]
            async with s.get(f"http://127.0.0.1:{hp}/healthz") as r:
                assert r.status == 200
            async with s.get(f"http://127.0.0.1:{hp}/readyz") as r:
                assert r.status == 503
            ready["v"] = True
            async with s.get(f"http://127.0.0.1:{hp}/readyz") as r:
                assert r.status == 200
            async with s.get(f"http://127.0.0.1:{mp}/metrics") as r:
                assert "intel_deviceplugin_operator_reconciles 7" in await r.text()
    finally:
        await health.cleanup()
        await mets.cleanup()


def test_serving_cert_ignores_missing_and_broken_files(tmp_path: Path) -> None:
    serving = ServingCert(tmp_path)
    assert not serving.reload_if_changed() and not serving.loaded
    (tmp_path / "tls.crt").write_text("garbage")
    (tmp_path / "tls.key").write_text("garbage")
    assert not serving.reload_if_changed() and not serving.loaded


def test_parse_bind() -> None:
    assert parse_bind(":8081") == ("", 8081)
    assert parse_bind("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_bind("0") == ("", 0)
    assert parse_bind("[::1]:8080") == ("::1", 8080)


class FakeCertApi:
    def __init__(self, with_secret: bool = True) -> None:
        self.secret: Secret | None = (
            Secret(metadata=ObjectMeta(name="cert", namespace="ns", resourceVersion="1"), type="Opaque")
            if with_secret
            else None
        )
        self.configs: dict[str, dict[str, Any]] = {
            "m": {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "m"},
                "webhooks": [
                    {
                        "name": "a.kb.io",
                        "clientConfig": {},
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                    }
                ],
            },
            "v": {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "v"},
                "webhooks": [
                    {
                        "name": "b.kb.io",
                        "clientConfig": {},
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                    },
                    {
                        "name": "c.kb.io",
                        "clientConfig": {},
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                    },
                ],
            },
        }
        self.patches: list[tuple[str, list[dict[str, Any]]]] = []
        self.writes = 0

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        if res is Secret:
            if self.secret is None:
                raise ApiError(status=Status(code=404, message="nf"))
            return copy.deepcopy(self.secret)
        kind = {"MutatingWebhookConfiguration": "m", "ValidatingWebhookConfiguration": "v"}[res.__name__]
        if name != kind:
            raise ApiError(status=Status(code=404, message="nf"))
        return res.from_dict(copy.deepcopy(self.configs[name]))

    async def replace(self, obj: Secret) -> Secret:
        self.writes += 1
        self.secret = copy.deepcopy(obj)
        return obj

    async def create(self, obj: Secret) -> Secret:
        self.writes += 1
        self.secret = copy.deepcopy(obj)
        return obj

    async def patch(self, res: Any, name: str, ops: list[dict[str, Any]], *, patch_type: PatchType) -> None:
        assert patch_type is PatchType.JSON
        assert res in (MutatingWebhookConfiguration, ValidatingWebhookConfiguration)
        self.patches.append((name, ops))
        for op in ops:
            if op["op"] == "add":
                idx = int(op["path"].split("/")[2])
                self.configs[name]["webhooks"][idx]["clientConfig"]["caBundle"] = op["value"]


@pytest.mark.parametrize("with_secret", [True, False])
async def test_self_managed_issue_store_and_inject(tmp_path: Path, with_secret: bool) -> None:
    api = FakeCertApi(with_secret)
    dns = service_dns_names("svc", "ns")
    certs = SelfManagedCerts(
        cast(AsyncClient, api), SelfManagedConfig("ns", "cert", dns, ("m", "v", "absent"), tmp_path)
    )
    bundle = await certs.ensure()
    assert api.writes == 1 and api.secret is not None
    stored = CertBundle.from_secret_data(api.secret.data)
    assert stored == bundle and renewal_reason(stored, dns, NOW) == ""
    assert (tmp_path / "tls.crt").read_bytes() == bundle.tls_cert
    want = base64.b64encode(bundle.ca_bundle()).decode()
    for cfg in api.configs.values():
        assert all(h["clientConfig"]["caBundle"] == want for h in cfg["webhooks"])
    await certs.ensure()  # nothing due: no new write, no new patch
    assert api.writes == 1 and len(api.patches) == 2
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    renewed = await certs.ensure(later)
    assert api.writes == 2 and renewed.tls_cert != bundle.tls_cert
    assert renewed.ca_cert != bundle.ca_cert and renewed.previous_ca_cert == bundle.ca_cert
    assert api.secret is not None and "ca.key" not in (api.secret.data or {})


def test_cli_flags() -> None:
    p = cli.parser()
    opts = p.parse_args(["-leader-elect", "-devices=gpu", "--devices", "qat", "-deviceplugin-namespace", "x"])
    assert opts.leader_elect and opts.deviceplugin_namespace == "x"
    assert cli.select_devices(opts.devices) == (DeviceKind.GPU, DeviceKind.QAT)
    assert cli.select_devices(None) == ALL_KINDS
    with pytest.raises(cli.UsageError, match="Unsupported device: tpu"):
        cli.select_devices(["tpu"])
    with pytest.raises(cli.UsageError, match="Duplicate device: gpu"):
        cli.select_devices(["gpu", "gpu"])
    assert cli.image_env({"INTEL_GPU_PLUGIN_SHA": "x", "PATH": "/bin", "EMPTY_SHA": ""}) == {
        "INTEL_GPU_PLUGIN_SHA": "x"
    }
    assert cli.identity({"POD_NAME": "pod-1"}) == "pod-1"
    assert cli.main(["--devices=foo"]) == 1
    off = p.parse_args(["-leader-elect=false", "--metrics-secure=true"])
    assert off.leader_elect is False and off.metrics_secure is True
    with pytest.raises(SystemExit):
        p.parse_args(["--leader"])  # no abbreviations, as with Go's flag package
    with pytest.raises(SystemExit):
        p.parse_args(["--leader-elect=maybe"])


async def test_cli_serves_webhooks_without_a_reachable_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator keeps serving admission while the API server is down, and stops on cancellation."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    bundle = issue(None, ("localhost",), NOW)
    write_pair(tmp_path / "certs", bundle)
    p = cli.parser()
    opts = p.parse_args(
        [
            "--webhook-cert-dir",
            str(tmp_path / "certs"),
            "--webhook-port",
            "19744",
            "--health-probe-bind-address",
            "127.0.0.1:19745",
            "--metrics-bind-address",
            "0",
        ]
    )
    task = asyncio.create_task(cli.amain(opts, {"DEVICEPLUGIN_NAMESPACE": "ns"}, pod_webhooks))
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(100):
                try:
                    async with s.get("http://127.0.0.1:19745/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
            async with s.post(
                f"https://localhost:19744{DeviceKind.QAT.validate_path}",
                json=review(DeviceKind.QAT, {"image": "intel/intel-qat-plugin:0.36.0"}),
                ssl=client_ctx(bundle),
            ) as r:
                assert (await r.json())["response"]["allowed"] is True
            # The pod webhooks of the enabled kinds are served beside the CR ones.
            asking = pod_review(pod(with_resources("app", {"sgx.intel.com/epc": "1Mi"})))
            async with s.post(
                "https://localhost:19744/mutate--v1-pod", json=asking, ssl=client_ctx(bundle)
            ) as r:
                assert (await r.json())["response"]["patchType"] == "JSONPatch"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def test_controller_thread_failure_reaches_the_caller() -> None:
    from intel_device_plugins.operator.controller import ControllerConfig, run_controllers

    def broken_client() -> AsyncClient:
        raise RuntimeError("no kubeconfig")

    with pytest.raises(RuntimeError, match="controller thread failed") as info:
        await run_controllers(ControllerConfig("ns", ALL_KINDS, {}), Metrics(), broken_client)
    assert "no kubeconfig" in str(info.value.__cause__)


def test_the_cert_manager_install_never_loads_cryptography() -> None:
    """cryptography costs about 8 MiB of RSS; only the self-managed certificate mode needs it."""
    import subprocess
    import sys

    code = "import sys, intel_device_plugins.operator.cli; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_self_managed_mode_keeps_cryptography_out_of_the_operator_process() -> None:
    import subprocess
    import sys

    code = "import sys, intel_device_plugins.kube.selfcerts; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


async def test_a_known_good_secret_is_not_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from intel_device_plugins.kube import selfcerts

    calls: list[str] = []
    real = selfcerts.certificate_request

    async def counting(request: dict[str, Any]) -> dict[str, Any]:
        calls.append(request["op"])
        return await real(request)

    monkeypatch.setattr(selfcerts, "certificate_request", counting)
    api = FakeCertApi(True)
    certs = SelfManagedCerts(
        cast(AsyncClient, api),
        SelfManagedConfig("ns", "cert", service_dns_names("svc", "ns"), ("m",), tmp_path),
    )
    await certs.ensure()
    first = list(calls)
    assert "issue" in first
    await certs.ensure()
    await certs.ensure()
    assert calls == first  # the stored Secret is known good until its renewal time
    assert 1.0 <= certs.next_check_s(dt.datetime.now(dt.UTC)) <= 300.0
    await certs.ensure(dt.datetime.now(dt.UTC) + dt.timedelta(days=300))  # due: checked, and renewed
    assert calls[len(first) :] == ["check", "issue"]


def served_by(port: int, bundle: CertBundle) -> bool:
    """Whether the server on ``port`` completes a TLS handshake trusting only ``bundle``'s CA."""
    import socket

    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx(bundle).wrap_socket(raw, server_hostname="localhost"),
        ):
            return True
    except ssl.SSLError:
        return False


def test_serving_cert_reloads_a_swapped_volume_even_with_equal_timestamps(tmp_path: Path) -> None:
    """A rotation whose files carry the previous files' timestamps (two writes within one tick of a coarse
    clock, or a copy that keeps them) is still a new certificate."""
    import os

    first, second = issue(None, ("localhost",), NOW), issue(None, ("localhost",), NOW)
    kubelet_volume(tmp_path, first, "gen1")
    stamp = (tmp_path / "tls.crt").stat().st_mtime_ns, (tmp_path / "tls.key").stat().st_mtime_ns
    serving = ServingCert(tmp_path)
    assert serving.reload_if_changed() and not serving.reload_if_changed()
    kubelet_volume(tmp_path, second, "gen2")
    for name, ns in zip(("tls.crt", "tls.key"), stamp, strict=True):
        os.utime(tmp_path / name, ns=(ns, ns))
    assert serving.reload_if_changed()
    assert not serving.reload_if_changed()


async def test_serving_cert_watch_reloads_within_a_second_of_a_kubelet_swap(tmp_path: Path) -> None:
    """cert-manager mode: the mounted Secret is swapped by the kubelet; the watch reloads on the change
    itself, not at its periodic check (a minute by default)."""
    first, second = issue(None, ("localhost",), NOW), issue(None, ("localhost",), NOW)
    kubelet_volume(tmp_path, first, "gen1")
    serving = ServingCert(tmp_path)
    assert serving.reload_if_changed()
    watcher = asyncio.create_task(serving.watch())
    runner = None
    try:
        runner = await start(webhook_app(Metrics(), review_handlers()), "127.0.0.1", 0, serving.context)
        port = runner.addresses[0][1]
        assert await asyncio.to_thread(served_by, port, first)
        await asyncio.sleep(0.3)  # the watch is waiting for a change
        kubelet_volume(tmp_path, second, "gen2")
        for _ in range(20):
            if await asyncio.to_thread(served_by, port, second):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the swapped certificate was not served within a second")
        assert not await asyncio.to_thread(served_by, port, first)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()
