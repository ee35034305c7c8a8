"""Pod webhooks and the hardened server: latency, memory under idle connections, standalone footprint.

- ``direct``: the standalone ``intel_sgx_admissionwebhook`` and ``intel_fpga_admissionwebhook`` processes
  (the FPGA one with its API server address pointing at a closed port, so it maps nothing and its watch
  idles in retry); pod AdmissionReviews over TLS at ``--rate`` per second for ``--seconds``: SGX pods with
  an aesmd sidecar (a 9-operation patch), FPGA pods with plain resources (no-op) and with an unknown
  fpga.intel.com name (denial). p50/p99 and each process's RSS at rest and at peak.
- ``idle``: the operator process (same server, all kinds enabled, API server unreachable): RSS with 0, 100,
  400 and 800 idle TLS connections (handshake done, no request), then after they are closed; also how many
  of them the server kept (the connection cap) and how many were still open after the header deadline.
- ``cluster``: a harness control plane with the operator installed (``k8stest.operatorinstall``); dry-run
  pod creates at ``--rate`` per second through the API server, which calls ``/pods`` and
  ``/mutate--v1-pod``, against the same pods in kube-system, which the webhooks' namespace selector
  excludes (the API server's own latency).

    .venv/bin/python bench/bench_pod_webhooks.py direct --rate 50 --seconds 20
    .venv/bin/python bench/bench_pod_webhooks.py direct --rate 500 --seconds 10 --clients 4
    .venv/bin/python bench/bench_pod_webhooks.py idle
    .venv/bin/python bench/bench_pod_webhooks.py idle --bin-dir <other checkout>/.venv/bin   # baseline
    .venv/bin/python bench/bench_pod_webhooks.py cluster --rate 50 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from intel_device_plugins.kube.certs import issue
from intel_device_plugins.kube.selfcerts import write_pair
from k8stest.ports import reserve_port


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def sgx_pod(i: int) -> dict[str, Any]:
    def c(name: str, epc: str) -> dict[str, Any]:
        amounts = {"sgx.intel.com/epc": epc, "cpu": "100m"}
        return {"name": name, "image": "busybox", "resources": {"limits": amounts, "requests": dict(amounts)}}

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"sgx-{i}", "annotations": {"sgx.intel.com/quote-provider": "aesmd"}},
        "spec": {"containers": [c("app", "1Mi"), c("aesmd", "2Mi")]},
    }


def fpga_pod(i: int, unknown: bool) -> dict[str, Any]:
    amounts = {"cpu": "100m", **({"fpga.intel.com/not-mapped": "1"} if unknown else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fpga-{i}"},
        "spec": {
            "containers": [
                {"name": "app", "image": "busybox", "resources": {"limits": amounts, "requests": amounts}}
            ]
        },
    }


def review(obj: dict[str, Any], i: int) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"u{i}",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "bench",
            "operation": "CREATE",
            "object": obj,
        },
    }


@contextmanager
def certificate(root: Path) -> Iterator[str]:
    bundle = issue(None, ("localhost",), dt.datetime.now(dt.UTC))
    write_pair(root / "certs", bundle)
    yield bundle.ca_bundle().decode()


def dead_kubeconfig(root: Path) -> Path:
    kube = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{reserve_port().port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    path = root / "kubeconfig"
    path.write_text(json.dumps(kube))
    return path


BIN_DIR = [Path(sys.executable).parent]  # --bin-dir: run another checkout's processes as the baseline


def start_process(root: Path, script: str, args: list[str]) -> subprocess.Popen[bytes]:
    exe = BIN_DIR[0] / script
    env = {**os.environ, "KUBECONFIG": str(dead_kubeconfig(root)), "DEVICEPLUGIN_NAMESPACE": "bench"}
    log = (root / f"{script}.log").open("w")
    return subprocess.Popen([str(exe), *args], env=env, stdout=subprocess.DEVNULL, stderr=log)


async def wait_http(port: int, path: str, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(f"http://127.0.0.1:{port}{path}") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError(f"no 200 from :{port}{path}")


async def wait_tls(port: int, ca: str, limit_s: float = 30) -> None:
    """Until the webhook port completes a TLS handshake (it opens after the health port)."""
    ctx = ssl.create_default_context(cadata=ca)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise TimeoutError(f"webhook port {port} did not open")


async def drive(
    port: int, path: str, ca: str, rate: float, seconds: float, bodies: list[bytes]
) -> list[float]:
    ctx = ssl.create_default_context(cadata=ca)
    latencies: list[float] = []
    total = int(rate * seconds)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx, limit=16), timeout=aiohttp.ClientTimeout(total=5)
    ) as session:

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                async with session.post(
                    f"https://localhost:{port}{path}",
                    data=bodies[i % len(bodies)],
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    ok = resp.status == 200 and "response" in await resp.json()
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            latencies.append((time.perf_counter() - t0) * 1000 if ok else float("inf"))

        begin = time.perf_counter()
        tasks = []
        for i in range(total):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return latencies


def _drive_worker(args: tuple[int, str, str, float, float, list[bytes]]) -> list[float]:
    return asyncio.run(drive(*args))


def drive_parallel(
    port: int, path: str, ca: str, rate: float, seconds: float, bodies: list[bytes], workers: int
) -> list[float]:
    """``drive`` over ``workers`` client processes: one Python client tops out near 150 TLS requests/s."""
    if workers <= 1:
        return asyncio.run(drive(port, path, ca, rate, seconds, bodies))
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_drive_worker, [(port, path, ca, rate / workers, seconds, bodies)] * workers)
    return [v for part in parts for v in part]


def direct(rate: float, seconds: float, workers: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        root = Path(tmp)
        with certificate(root) as ca:
            for script, path, bodies in (
                (
                    "intel_sgx_admissionwebhook",
                    "/mutate--v1-pod",
                    [json.dumps(review(sgx_pod(i), i)).encode() for i in range(10)],
                ),
                (
                    "intel_fpga_admissionwebhook",
                    "/pods",
                    [json.dumps(review(fpga_pod(i, i % 2 == 1), i)).encode() for i in range(10)],
                ),
            ):
                port, health = reserve_port().port, reserve_port().port  # held until the script exits
                proc = start_process(
                    root,
                    script,
                    [
                        f"--webhook-cert-dir={root / 'certs'}",
                        f"--webhook-port={port}",
                        f"--health-probe-bind-address=127.0.0.1:{health}",
                    ],
                )
                try:
                    asyncio.run(wait_http(health, "/healthz"))
                    asyncio.run(wait_tls(port, ca))
                    time.sleep(1.0)
                    rest = rss_mib(proc.pid)
                    asyncio.run(drive(port, path, ca, 20, 1, bodies))  # warm-up, not counted
                    began, cpu_before = time.perf_counter(), cpu_s(proc.pid)
                    lat = drive_parallel(port, path, ca, rate, seconds, bodies, workers)
                    elapsed, cpu_used = time.perf_counter() - began, cpu_s(proc.pid) - cpu_before
                    peak = rss_mib(proc.pid, "VmHWM")
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                report(
                    f"direct {script}",
                    {
                        "requests": len(lat),
                        "rate /s": rate,
                        "client processes": workers,
                        "failed (5 s client timeout)": sum(1 for v in lat if v == float("inf")),
                        "answered /s": round(sum(1 for v in lat if v != float("inf")) / elapsed),
                        "p50 ms": pct(lat, 0.5),
                        "p99 ms": pct(lat, 0.99),
                        "max ms": round(max(lat), 2),
                        "server CPU ms per request": round(cpu_used * 1000 / max(1, len(lat)), 2),
                        "RSS at rest MiB": rest,
                        "peak RSS MiB": peak,
                    },
                )


async def hold_idle(port: int, ca: str, count: int, held: list[asyncio.StreamWriter]) -> None:
    ctx = ssl.create_default_context(cadata=ca)

    async def one() -> None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            held.append(writer)
        except (OSError, ssl.SSLError):
            pass

    for start in range(0, count, 50):
        await asyncio.gather(*(one() for _ in range(min(50, count - start))))


def open_count(held: list[asyncio.StreamWriter]) -> int:
    return sum(1 for w in held if not w.is_closing() and not w.transport.is_closing())


def idle() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        root = Path(tmp)
        with certificate(root) as ca:
            port, health = reserve_port().port, reserve_port().port  # held until the script exits
            proc = start_process(
                root,
                "intel_deviceplugin_operator",
                [
                    f"--webhook-cert-dir={root / 'certs'}",
                    f"--webhook-port={port}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    "--metrics-bind-address=0",
                ],
            )
            try:
                asyncio.run(wait_http(health, "/healthz"))
                time.sleep(2.0)
                rows: dict[str, Any] = {"RSS with 0 connections MiB": rss_mib(proc.pid)}

                async def scenario() -> None:
                    for count in (100, 400, 800):
                        held: list[asyncio.StreamWriter] = []
                        await hold_idle(port, ca, count, held)
                        await asyncio.sleep(1.0)
                        rows[f"RSS with {count} idle MiB"] = rss_mib(proc.pid)
                        rows[f"  of {count}: still open after 1 s"] = open_count(held)
                        for w in held:
                            w.close()
                        await asyncio.sleep(2.0)
                        rows[f"RSS after the {count} closed MiB"] = rss_mib(proc.pid)
                    held = []
                    await hold_idle(port, ca, 200, held)
                    await asyncio.sleep(12.0)  # beyond the 10 s header deadline
                    rows["of 200 silent: open after 12 s"] = open_count(held)
                    for w in held:
                        w.close()
                    await asyncio.sleep(2.0)
                    rows["RSS at the end MiB"] = rss_mib(proc.pid)
                    rows["peak RSS MiB"] = rss_mib(proc.pid, "VmHWM")

                asyncio.run(scenario())
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            report("idle connections to the operator's webhook port", rows)


def through_api(client: Any, ns: str, rate: float, seconds: float) -> dict[str, Any]:
    """Dry-run pod creates in ``ns`` at ``rate``; the odd ones are SGX pods (their EPC annotation shows)."""
    from k8stest.kubeclient import ApiError, KubeClient

    lat: list[float] = []
    failed = 0
    lock = threading.Lock()
    clients = [KubeClient(client.creds) for _ in range(8)]

    def one(i: int) -> None:
        nonlocal failed
        body = sgx_pod(i) if i % 2 else fpga_pod(i, False)
        t0 = time.perf_counter()
        try:
            created = clients[i % len(clients)].create(f"/api/v1/namespaces/{ns}/pods?dryRun=All", body)
            annotations = created["metadata"].get("annotations", {})
            ok = ns == "kube-system" or i % 2 == 0 or "sgx.intel.com/epc" in annotations
        except ApiError:
            ok = False
        with lock:
            lat.append((time.perf_counter() - t0) * 1000)
            failed += 0 if ok else 1

    total = int(rate * seconds)
    threads = []
    begin = time.perf_counter()
    for i in range(total):
        time.sleep(max(0.0, begin + i / rate - time.perf_counter()))
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
    achieved = total / (time.perf_counter() - begin)
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    return {
        "requests": total,
        "rate /s asked / sent": f"{rate} / {achieved:.0f}",
        "not as expected": failed,
        "p50 ms": pct(lat, 0.5),
        "p99 ms": pct(lat, 0.99),
        "max ms": round(max(lat), 1),
    }


def cluster(rate: float, seconds: float) -> None:
    from k8stest.binaries import find_binaries
    from k8stest.controlplane import running_control_plane
    from k8stest.operatorinstall import install

    bins, reason = find_binaries()
    if bins is None:
        raise SystemExit(reason)
    with (
        tempfile.TemporaryDirectory(prefix="bench-podhooks-") as tmp,
        running_control_plane(bins, Path(tmp) / "cp") as cp,
    ):
        installed = install(cp, Path(tmp) / "operator")
        client = cp.client()
        try:
            client.create("/api/v1/namespaces", {"metadata": {"name": "bench"}})
            for ns in ("bench", "kube-system", "bench"):  # warm-up run first, then baseline, then webhooks
                title = f"pods through the API server in {ns}"
                report(
                    title + (" (webhooks excluded)" if ns == "kube-system" else ""),
                    through_api(client, ns, rate, seconds),
                )
            op = installed.operators[0]
            report(
                "operator", {"peak RSS MiB": rss_mib(op.proc.pid, "VmHWM"), "CPU s used": cpu_s(op.proc.pid)}
            )
        finally:
            client.close()
            installed.stop()


def report(title: str, rows: dict[str, Any]) -> None:
    print(f"== {title}")
    for k, v in rows.items():
        print(f"{k:>36}: {v}")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("direct", "idle", "cluster"))
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=1, help="client processes for direct (500/s needs 4)")
    ap.add_argument("--bin-dir", type=Path, help="directory of the console scripts (default: this venv)")
    args = ap.parse_args()
    if args.bin_dir:
        BIN_DIR[0] = args.bin_dir
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    if args.what == "direct":
        direct(args.rate, args.seconds, args.clients)
    elif args.what == "idle":
        idle()
    else:
        cluster(args.rate, args.seconds)
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
