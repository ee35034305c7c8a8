"""One hostile peer holds 800 connections to the operator's ports; does the API server still get through?

Everything runs on loopback, each role from its own address, because the server shares its connections out
by source address:

- the operator (all kinds, API server unreachable) serves its webhook port (TLS) and health port on
  127.0.0.1;
- the hostile peer, 127.0.0.2, a separate process, keeps 800 connections open for ``--seconds``: 250 idle
  TLS connections to the webhook port (handshake done, no request), 250 keep-alive TLS connections after
  one valid review each, and 300 idle TCP connections to the health port. A connection the server drops is
  opened again one second later, so the peer never holds more than 800;
- the API server, 127.0.0.10: a GpuDevicePlugin validation review on a new connection every 0.5 s (as after
  its idle connection expired), answered within the webhook timeout of 10 s or failed;
- the kubelet, 127.0.0.20: ``GET /healthz`` on a new connection every second with a 1 s timeout, as its
  probes do.

The figures: answered reviews and probes of those sent during the siege, how many hostile connections
were established (``/proc/net/tcp``: those the server holds plus those waiting in its accept queue), the
operator's RSS at rest, at peak, and 3 s and 15 s after the siege, and the ERROR and traceback lines the
operator logged. ``--baseline REF`` runs the same siege first against the
operator of git revision REF (its ``src/`` from ``git archive``), so the two are compared in one run.

    .venv/bin/python bench/bench_webhook_siege.py --seconds 30 --baseline main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from bench_pod_webhooks import certificate, dead_kubeconfig, rss_mib, wait_http, wait_tls

from k8stest.ports import reserve_port

SERVER, HOSTILE, API_SERVER, KUBELET = "127.0.0.1", "127.0.0.2", "127.0.0.10", "127.0.0.20"
IDLE_TLS, KEEPALIVE_TLS, IDLE_HEALTH = 250, 250, 300
VALIDATE_GPU = "/validate-deviceplugin-intel-com-v1-gpudeviceplugin"


def gpu_review(i: int) -> bytes:
    cr = {
        "apiVersion": "deviceplugin.intel.com/v1",
        "kind": "GpuDevicePlugin",
        "metadata": {"name": f"gpu-{i}"},
        "spec": {"image": "intel/intel-gpu-plugin:0.34.0", "sharedDevNum": 1, "logLevel": 2},
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"u{i}",
                "kind": {"group": "deviceplugin.intel.com", "version": "v1", "kind": "GpuDevicePlugin"},
                "resource": {
                    "group": "deviceplugin.intel.com",
                    "version": "v1",
                    "resource": "gpudeviceplugins",
                },
                "operation": "CREATE",
                "object": cr,
            },
        }
    ).encode()


def post_bytes(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# ----- the hostile peer (its own process) ------------------------------------------------------------


async def hostile(port: int, health: int, ca: str, seconds: float) -> dict[str, int]:
    """Hold the 800 connections until ``seconds`` pass; open each again 1 s after the server drops it."""
    ctx = ssl.create_default_context(cadata=ca)
    deadline = time.monotonic() + seconds
    opened = [0]
    review = post_bytes(VALIDATE_GPU, gpu_review(0))

    async def hold(kind: str) -> None:
        while time.monotonic() < deadline:
            try:
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    if kind == "health":
                        reader, writer = await asyncio.open_connection(
                            SERVER, health, local_addr=(HOSTILE, 0)
                        )
                    else:
                        reader, writer = await asyncio.open_connection(
                            SERVER, port, ssl=ctx, server_hostname="localhost", local_addr=(HOSTILE, 0)
                        )
                    opened[0] += 1
                    if kind == "keepalive":
                        writer.write(review)
                        await reader.readuntil(b"\r\n\r\n")
                    while await reader.read(4096):  # until the server drops it
                        pass
                    writer.close()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
                pass
            await asyncio.sleep(1.0)

    kinds = ["idle"] * IDLE_TLS + ["keepalive"] * KEEPALIVE_TLS + ["health"] * IDLE_HEALTH
    tasks = []
    for i in range(0, len(kinds), 50):  # open in batches, as a client with a connection pool would
        tasks += [asyncio.create_task(hold(kind)) for kind in kinds[i : i + 50]]
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    return {"connections opened": opened[0]}


# ----- the API server and the kubelet -----------------------------------------------------------------


async def legitimate(port: int, health: int, ca: str, seconds: float) -> dict[str, Any]:
    ctx = ssl.create_default_context(cadata=ca)
    reviews: list[bool] = []
    probes: list[bool] = []

    async def review(i: int) -> None:
        connector = aiohttp.TCPConnector(ssl=ctx, local_addr=(API_SERVER, 0), force_close=True)
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as s,
                s.post(f"https://localhost:{port}{VALIDATE_GPU}", data=gpu_review(i)) as r,
            ):
                reviews.append(r.status == 200 and (await r.json())["response"]["allowed"] is True)
        except (aiohttp.ClientError, OSError, TimeoutError):
            reviews.append(False)

    async def probe() -> None:
        connector = aiohttp.TCPConnector(local_addr=(KUBELET, 0), force_close=True)
        try:
            async with (
                aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=1)) as s,
                s.get(f"http://{SERVER}:{health}/healthz") as r,
            ):
                probes.append(r.status == 200)
        except (aiohttp.ClientError, OSError, TimeoutError):
            probes.append(False)

    tasks = []
    began = time.monotonic()
    for tick in range(int(seconds * 2)):
        await asyncio.sleep(max(0.0, began + tick * 0.5 - time.monotonic()))
        tasks.append(asyncio.create_task(review(tick)))
        if tick % 2 == 0:
            tasks.append(asyncio.create_task(probe()))
    await asyncio.gather(*tasks)
    return {
        "reviews answered": f"{sum(reviews)} of {len(reviews)}",
        "health probes answered (1 s timeout)": f"{sum(probes)} of {len(probes)}",
    }


def held_from(source: str, ports: tuple[int, ...]) -> int:
    """Established TCP connections from ``source`` to ``ports`` as the kernel sees them (server side)."""
    want_ip = "".join(f"{int(b):02X}" for b in reversed(source.split(".")))
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if state == "01" and int(local.split(":")[1], 16) in ports and remote.split(":")[0] == want_ip:
            count += 1
    return count


def siege(seconds: float, src: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-siege-") as tmp:
        root = Path(tmp)
        with certificate(root) as ca:
            port, health = reserve_port().port, reserve_port().port  # held until the script exits
            env = {**os.environ, "KUBECONFIG": str(dead_kubeconfig(root)), "DEVICEPLUGIN_NAMESPACE": "bench"}
            if src is not None:
                env["PYTHONPATH"] = str(src)
            log_path = root / "operator.log"
            with log_path.open("w") as log:
                operator = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        "from intel_device_plugins.operator.cli import main; raise SystemExit(main())",
                        f"--webhook-cert-dir={root / 'certs'}",
                        f"--webhook-port={port}",
                        f"--health-probe-bind-address={SERVER}:{health}",
                        "--metrics-bind-address=0",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            rows: dict[str, Any] = {}
            try:
                asyncio.run(wait_http(health, "/healthz"))
                asyncio.run(wait_tls(port, ca))
                time.sleep(2.0)
                rows["RSS at rest MiB"] = rss_mib(operator.pid)
                (root / "ca.pem").write_text(ca)
                attacker = subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "hostile",
                        f"--port={port}",
                        f"--health={health}",
                        f"--ca-file={root / 'ca.pem'}",
                        f"--seconds={seconds + 15}",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                try:
                    assert attacker.stdout is not None
                    attacker.stdout.readline()  # "ready": all 800 connections attempted
                    time.sleep(3.0)
                    rows["hostile connections established, siege start"] = held_from(HOSTILE, (port, health))
                    rows.update(asyncio.run(legitimate(port, health, ca, seconds)))
                    rows["hostile connections established, siege end"] = held_from(HOSTILE, (port, health))
                    rows["peak RSS MiB"] = rss_mib(operator.pid, "VmHWM")
                finally:
                    attacker.terminate()
                    attacker.wait(timeout=30)
                time.sleep(3.0)
                rows["RSS 3 s after the siege MiB"] = rss_mib(operator.pid)
                time.sleep(12.0)
                rows["RSS 15 s after the siege MiB"] = rss_mib(operator.pid)
            finally:
                operator.terminate()
                operator.wait(timeout=30)
            text = log_path.read_text()
            rows["operator log: ERROR lines / tracebacks"] = (
                f"{text.count('ERROR')} / {text.count('Traceback')} ({len(text.splitlines())} lines)"
            )
    return rows


def baseline_src(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", ref, "src"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def report(title: str, rows: dict[str, Any]) -> None:
    print(f"\n### {title}\n\n| | |\n|---|---|")
    for key, value in rows.items():
        print(f"| {key} | {value} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode")
    h = sub.add_parser("hostile", help="the hostile peer's process (started by the benchmark)")
    h.add_argument("--port", type=int, required=True)
    h.add_argument("--health", type=int, required=True)
    h.add_argument("--ca-file", type=Path, required=True)
    h.add_argument("--seconds", type=float, required=True)
    p.add_argument("--seconds", type=float, default=30.0, help="length of the measured siege (at most 600)")
    p.add_argument("--baseline", metavar="REF", help="run the same siege against git revision REF first")
    opts = p.parse_args()
    if opts.mode == "hostile":
        print(
            json.dumps(asyncio.run(hostile(opts.port, opts.health, opts.ca_file.read_text(), opts.seconds)))
        )
        return 0
    seconds = min(opts.seconds, 600.0)
    if opts.baseline:
        with tempfile.TemporaryDirectory(prefix="bench-siege-baseline-") as tmp:
            report(
                f"Siege, operator of {opts.baseline}", siege(seconds, baseline_src(opts.baseline, Path(tmp)))
            )
    report("Siege, this tree", siege(seconds, None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
