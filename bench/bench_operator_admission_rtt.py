"""One CR AdmissionReview round trip through the operator's HTTPS server, in process, and its parts.

The webhook server (``kube/https.py``: ``start`` with the operator's TLS context, limits and the 16 CR review
routes) runs on a thread of its own with its own event loop, as in the operator; the client sends the
validating review of upstream's GPU sample over one kept-alive TLS 1.2+ connection, as the API server does,
``--reviews`` times. Reported: the round trip (p50/p90), the server thread's CPU per review, and in process
the parts the handler adds: decoding the body with the depth check, deciding, encoding the answer.

    .venv/bin/python bench/bench_operator_admission_rtt.py --reviews 2000
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import http.client
import json
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.kube.certs import issue
from intel_device_plugins.kube.https import ServingCert, load_json, start, webhook_app
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.selfcerts import write_pair
from intel_device_plugins.operator.admission import handle_review, review_handlers
from intel_device_plugins.operator.kinds import DeviceKind

SAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "operator" / "samples"


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d9f6c3e-1111-2222-3333-444455556666",
            "kind": {"group": "deviceplugin.intel.com", "version": "v1", "kind": obj["kind"]},
            "resource": {"group": "deviceplugin.intel.com", "version": "v1", "resource": "gpudeviceplugins"},
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


def serve(cert_dir: Path, port_box: list[int], cpu_box: list[float], ready: threading.Event) -> None:
    async def main() -> None:
        serving = ServingCert(cert_dir)
        serving.reload_if_changed()
        server = await start(webhook_app(Metrics(), review_handlers()), "127.0.0.1", 0, serving.context)
        port_box.append(server.addresses[0][1])
        ready.set()
        while True:
            cpu_box[:] = [time.thread_time()]
            await asyncio.sleep(0.01)

    asyncio.run(main())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reviews", type=int, default=2000)
    args = ap.parse_args()
    obj = yaml.safe_load((SAMPLE / "deviceplugin_v1_gpudeviceplugin.yaml").read_text())
    obj["metadata"].update(uid="u", creationTimestamp="2026-11-26T00:00:00Z")
    body = json.dumps(review(obj)).encode()
    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        cert_dir = Path(tmp)
        now = dt.datetime.now(dt.UTC)
        bundle = issue(None, ("localhost",), now)
        write_pair(cert_dir, bundle)
        port_box: list[int] = []
        cpu_box: list[float] = [0.0]
        ready = threading.Event()
        threading.Thread(target=serve, args=(cert_dir, port_box, cpu_box, ready), daemon=True).start()
        ready.wait(10)
        ctx = ssl.create_default_context(cadata=bundle.ca_cert.decode())
        ctx.set_alpn_protocols(["h2", "http/1.1"])  # as the API server offers
        conn = http.client.HTTPSConnection("localhost", port_box[0], context=ctx)
        conn.connect()
        assert conn.sock is not None
        alpn = conn.sock.selected_alpn_protocol()
        path = DeviceKind.GPU.validate_path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for _ in range(200):  # warm up
            conn.request("POST", path, body=body, headers=headers)
            conn.getresponse().read()
        rtt: list[float] = []
        time.sleep(0.05)
        cpu0 = cpu_box[0]
        for _ in range(args.reviews):
            t0 = time.perf_counter()
            conn.request("POST", path, body=body, headers=headers)
            answer = conn.getresponse().read()
            rtt.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.05)
        server_cpu_ms = (cpu_box[0] - cpu0) * 1000 / args.reviews
        assert json.loads(answer)["response"]["allowed"] is True
        conn.close()

    def per_call_ms(fn: Any, n: int = 5000) -> float:
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        return round((time.thread_time() - t0) * 1000 / n, 4)

    decoded = load_json(body)
    answered = handle_review(DeviceKind.GPU, "validate", decoded)
    print(f"{'reviews':>44}: {args.reviews} (one connection, ALPN {alpn})")
    print(f"{'round trip p50 / p90 ms':>44}: {pct(rtt, 0.5)} / {pct(rtt, 0.9)}")
    print(f"{'server thread CPU per review ms':>44}: {round(server_cpu_ms, 3)}")
    print(f"{'body decoded with the depth check ms':>44}: {per_call_ms(lambda: load_json(body))}")
    decide = per_call_ms(lambda: handle_review(DeviceKind.GPU, "validate", decoded))
    print(f"{'validating decision ms':>44}: {decide}")
    print(f"{'answer encoded ms':>44}: {per_call_ms(lambda: json.dumps(answered))}")
    print(f"{'review body bytes':>44}: {len(body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
