"""The standalone webhook processes: flags, serving, shutdown; and the FPGA one installed from
``deploy/webhooks/fpga/self-signed`` behind the real API server (self-managed certificate, shipped RBAC)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from intel_device_plugins.webhooks import cli
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, wait_for
from k8stest.operatorinstall import Kubectl
from k8stest.ports import release_all, reserve_ports, reserved_ports
from k8stest.process import ManagedProcess
from tests.webhooks.podfixtures import AF_NLB0, af, pod, review, with_resources
from tests.webhooks.tls import kubelet_volume, serving_cert

ROOT = Path(__file__).resolve().parents[2]
CR_PATH = "/validate-deviceplugin-intel-com-v1-gpudeviceplugin"


def script(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def ready(proc: ManagedProcess, health_port: int) -> bool:
    proc.check_alive()
    return get(health_port, "/readyz") == 200


def get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


def test_flags_follow_upstream_and_go_style() -> None:
    p = cli.parser("intel_fpga_admissionwebhook")
    argv = ["-v=1", "-leader-elect", "-webhook-port=9444", "--webhook-cert-dir=/c"]
    opts = p.parse_args(argv)
    assert (opts.verbosity, opts.leader_elect, opts.webhook_port, opts.webhook_cert_dir) == (
        1,
        True,
        9444,
        "/c",
    )
    assert opts.metrics_bind_address == "0" and opts.webhook_cert_mode == "files"
    with pytest.raises(SystemExit):
        p.parse_args(["--webhook-po=1"])  # no abbreviations


def test_sgx_webhook_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    _, client_ctx = serving_cert(tmp_path)
    with (
        reserved_ports(2) as (port, health),
        ManagedProcess(
            "sgx-webhook",
            [
                script("intel_sgx_admissionwebhook"),
                f"--webhook-cert-dir={tmp_path}",
                f"-webhook-port={port}",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                "-v=1",
            ],
            tmp_path / "sgx.log",
            env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME")},
        ) as proc,
    ):
        wait_for("sgx webhook /readyz", lambda: ready(proc, health), timeout=30)
        body = json.dumps(review(pod(with_resources("app", {"sgx.intel.com/epc": "1Mi"}))))
        conn = http.client.HTTPSConnection("localhost", port, context=client_ctx, timeout=5)
        conn.request("POST", "/mutate--v1-pod", body, {"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        conn.close()
        ops = json.loads(base64.b64decode(answer["response"]["patch"]))
        assert {"op": "add", "path": "/metadata/annotations", "value": {"sgx.intel.com/epc": "1Mi"}} in ops
        # Only the pod webhook is served here: the operator's CR admission paths are not.
        conn = http.client.HTTPSConnection("localhost", port, context=client_ctx, timeout=5)
        conn.request("POST", CR_PATH, body, {"Content-Type": "application/json"})
        assert conn.getresponse().status == 404
        conn.close()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.popen.wait(10) == 0


NS = "intelfpgawebhook-system"
PREFIX = "intelfpgawebhook-"


@pytest.fixture(scope="module")
def fpga_standalone(
    k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """Apply the self-signed overlay; run the webhook locally as its Deployment would (as operatorinstall)."""
    cp = k8s_control_plane
    work = tmp_path_factory.mktemp("fpga-standalone")
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    overlay = ROOT / "deploy" / "webhooks" / "fpga" / "self-signed"
    kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=180s", check=False, timeout=200)
    rendered = [d for d in yaml.safe_load_all(kubectl("kustomize", str(overlay)).stdout) if d]
    (dep,) = [d for d in rendered if d["kind"] == "Deployment"]
    kubectl("apply", "-k", str(overlay))
    kubectl(
        "wait", "--for=condition=Established", "crd", "acceleratorfunctions.fpga.intel.com", "--timeout=60s"
    )
    kubectl("scale", "-n", NS, "deployment", f"{PREFIX}webhook", "--replicas=0")
    kubectl("delete", "-n", NS, "service", f"{PREFIX}webhook-service")
    kubectl(
        "create", "-n", NS, "service", "externalname", f"{PREFIX}webhook-service", "--external-name=localhost"
    )
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    env |= {"POD_NAMESPACE": NS, "KUBECONFIG": str(cp.service_account_kubeconfig(NS, f"{PREFIX}webhook"))}
    reserved = reserve_ports(2)
    port, health = (r.port for r in reserved)
    argv = [script(container["command"][0]), *container["args"], f"--webhook-port={port}"]
    argv += [f"--webhook-cert-dir={work / 'certs'}", f"--health-probe-bind-address=127.0.0.1:{health}"]
    c = cp.client()
    try:
        with ManagedProcess("fpga-webhook", argv, work / "fpga.log", env=env) as proc:
            wait_for("fpga webhook /readyz", lambda: ready(proc, health), timeout=60)
            path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
            path += f"{PREFIX}mutating-webhook-configuration"
            c.request(
                "PATCH",
                path,
                [{"op": "add", "path": "/webhooks/0/clientConfig/service/port", "value": port}],
                content_type="application/json-patch+json",
            )
            wait_for(
                "CA bundle injected",
                lambda: bool(c.get(path)["webhooks"][0]["clientConfig"].get("caBundle")),
                timeout=30,
            )
            yield port
        log = (work / "fpga.log").read_text()
        assert "Traceback" not in log and "forbidden" not in log.lower(), log[-3000:]
    finally:
        c.close()
        release_all(reserved)
        # Wait: later modules install the same CRDs and must not meet them terminating.
        kubectl(
            "delete", "-k", str(overlay), "--ignore-not-found", "--timeout=180s", check=False, timeout=200
        )


def test_standalone_fpga_webhook_maps_through_the_api_server(
    fpga_standalone: int, k8s_control_plane: ControlPlane
) -> None:
    c = k8s_control_plane.client()
    ns = f"wh-{uuid.uuid4().hex[:8]}"
    try:
        c.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        c.create(f"/apis/fpga.intel.com/v2/namespaces/{ns}/acceleratorfunctions", af("nlb0", ns=ns))
        count = iter(range(1000))

        def created() -> dict[str, object] | None:
            body = pod(with_resources("app", {"fpga.intel.com/nlb0": "1"}), ns=ns)
            body["metadata"]["name"] = f"p{next(count)}"
            try:
                return c.create(f"/api/v1/namespaces/{ns}/pods", body)
            except ApiError as e:
                if "no such resource" in str(e):
                    return None
                raise

        made = wait_for("the standalone webhook to know the AF", created, timeout=30)
        assert made["spec"]["containers"][0]["resources"]["limits"] == {AF_NLB0: "1"}  # type: ignore[index]
    finally:
        c.delete(f"/api/v1/namespaces/{ns}")
        c.close()


def test_sgx_webhook_process_serves_a_swapped_mounted_certificate_within_a_second(tmp_path: Path) -> None:
    """cert-manager mode: the kubelet swaps the mounted Secret's ``..data``; the process serves the new
    certificate on the change, not at a periodic check, and by its content, whatever the files' times."""
    import datetime as dt
    import socket
    import ssl
    import time

    from intel_device_plugins.kube.certs import issue

    now = dt.datetime.now(dt.UTC)
    first, second = issue(None, ("localhost",), now), issue(None, ("localhost",), now)
    certs = tmp_path / "certs"
    kubelet_volume(certs, first, "gen1")
    reserved = reserve_ports(2)
    port, health = (r.port for r in reserved)
    proc = ManagedProcess(
        "sgx-webhook",
        [
            script("intel_sgx_admissionwebhook"),
            f"--webhook-cert-dir={certs}",
            f"-webhook-port={port}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ],
        tmp_path / "sgx.log",
        env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME")},
    )

    def trusted_by(ca: bytes) -> bool:
        ctx = ssl.create_default_context(cadata=ca.decode())
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                ctx.wrap_socket(raw, server_hostname="localhost"),
            ):
                return True
        except ssl.SSLError:
            return False

    try:
        wait_for("sgx webhook /readyz", lambda: ready(proc, health), timeout=30)
        assert trusted_by(first.ca_bundle())
        time.sleep(0.5)
        stamps = [(certs / name).stat().st_mtime_ns for name in ("tls.crt", "tls.key")]
        kubelet_volume(certs, second, "gen2")
        swapped = time.monotonic()
        for name, stamp in zip(("tls.crt", "tls.key"), stamps, strict=True):
            os.utime(certs / name, ns=(stamp, stamp))  # as old as the files they replace: still new content
        wait_for("the swapped certificate", lambda: trusted_by(second.ca_cert), timeout=1.0)
        print(f"served the swapped certificate after {time.monotonic() - swapped:.2f} s")
    finally:
        proc.stop()
        release_all(reserved)
