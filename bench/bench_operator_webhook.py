"""Admission latency of the operator's CR webhooks at a fixed request rate, and the operator's memory.

Starts the real ``intel_deviceplugin_operator`` process (its API server address points at a closed local
port, so the controllers idle in retry while the webhooks serve), then sends AdmissionReviews over TLS at
``--rate`` requests per second for ``--seconds``, alternating kinds, valid and invalid objects, mutating and
validating paths. Prints p50/p95/p99 latency and the process's peak RSS (VmHWM).

    .venv/bin/python bench/bench_operator_webhook.py --rate 50 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from intel_device_plugins.kube.certs import issue
from intel_device_plugins.kube.selfcerts import write_pair
from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from k8stest.ports import reserve_port


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def review(kind: DeviceKind, valid: bool, i: int) -> dict[str, Any]:
    image = node_image() if valid else "intel/other:devel"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"u{i}",
            "operation": "CREATE",
            "kind": {"group": "deviceplugin.intel.com", "version": "v1", "kind": kind.kind},
            "object": {
                "apiVersion": "deviceplugin.intel.com/v1",
                "kind": kind.kind,
                "metadata": {"name": f"cr{i}"},
                "spec": {"image": image, "logLevel": 2, "nodeSelector": {"a": "b"}},
            },
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(port: int, ca: str, rate: float, seconds: float) -> list[float]:
    ctx = ssl.create_default_context(cadata=ca)
    latencies: list[float] = []
    interval = 1.0 / rate
    total = int(rate * seconds)
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx, limit=8), timeout=timeout
    ) as session:

        async def one(i: int) -> None:
            kind = ALL_KINDS[i % len(ALL_KINDS)]
            path = kind.validate_path if i % 2 else kind.mutate_path
            body = review(kind, i % 3 != 0, i)
            start = time.perf_counter()
            try:
                async with session.post(f"https://localhost:{port}{path}", json=body) as resp:
                    data = await resp.json()
                    ok = data["response"]["uid"] == f"u{i}"
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            # A failed request counts as the worst case so it cannot hide in the percentiles.
            latencies.append((time.perf_counter() - start) * 1000 if ok else float("inf"))

        begin = time.perf_counter()
        tasks = []
        for i in range(total):
            delay = begin + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return latencies


async def wait_ready(port: int, limit_s: float = 20) -> None:
    deadline = time.monotonic() + limit_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("operator did not become ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bundle = issue(None, ("localhost",), dt.datetime.now(dt.UTC))
        write_pair(root / "certs", bundle)
        kube = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{reserve_port().port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
        (root / "kubeconfig").write_text(json.dumps(kube))
        wport, hport = reserve_port().port, reserve_port().port  # held until the script exits
        exe = Path(sys.executable).with_name("intel_deviceplugin_operator")
        log = (root / "operator.log").open("w")
        env = {**os.environ, "KUBECONFIG": str(root / "kubeconfig"), "DEVICEPLUGIN_NAMESPACE": "bench"}
        proc = subprocess.Popen(
            [
                str(exe),
                f"--webhook-cert-dir={root / 'certs'}",
                f"--webhook-port={wport}",
                f"--health-probe-bind-address=127.0.0.1:{hport}",
                "--metrics-bind-address=0",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            asyncio.run(wait_ready(hport))
            idle_kib = peak_rss_kib(proc.pid)
            lat = asyncio.run(drive(wport, bundle.ca_bundle().decode(), args.rate, args.seconds))
            peak_kib = peak_rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
            if os.environ.get("BENCH_LOG"):
                Path(os.environ["BENCH_LOG"]).write_text((root / "operator.log").read_text())
    result = {
        "requests": len(lat),
        "rate_per_s": args.rate,
        "p50_ms": round(statistics.median(lat), 2),
        "p95_ms": round(percentile(lat, 0.95), 2),
        "p99_ms": round(percentile(lat, 0.99), 2),
        "max_ms": round(max(lat), 2),
        "failed": sum(1 for v in lat if v == float("inf")),
        "rss_idle_mib": round(idle_kib / 1024, 1),
        "rss_peak_mib": round(peak_kib / 1024, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>14}: {v}")
    return 0 if result["p99_ms"] <= 20 and result["rss_peak_mib"] <= 120 else 1


if __name__ == "__main__":
    sys.exit(main())
