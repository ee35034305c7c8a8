"""QAT and DLB plugin figures on simulated nodes: scan CPU time, idle CPU, peak RSS, Allocate latency.

Run from the repository root::

    .venv/bin/python bench/bench_qat_dlb.py

Everything runs on this machine inside a temporary directory: the plugins as real processes, the
kubelet stand-in in this process, unix sockets only. The Allocate floor is an empty ``grpc.aio``
unary call (empty bytes, no protobuf) served by a separate process on the same kind of socket.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.server import FrameworkConfig, ResourceServer, to_proto_allocation
from intel_device_plugins.plugins.dlb.plugin import DlbPlugin
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process

QAT_NODE = """
[node]
numa_nodes = 2
[[qat]]
count = 2
vfs = 16
numa_node = 0
services = "sym;asym"
[[qat]]
count = 2
vfs = 16
numa_node = 1
services = "dc"
"""
"""64 VFs over four 4xxx PFs, all bound to vfio-pci: the steady state of a large QAT node."""

DLB_NODE = """
[node]
numa_nodes = 2
[[dlb]]
count = 4
vfs = 16
numa_node = 1
[[dlb]]
count = 2
numa_node = 0
"""
"""Four DLB PFs with 16 VFs each plus two whole PFs: 66 devices."""

SCANS = 200
CALLS = 6000
WARMUP_CALLS = 200
IDLE_SECONDS = 10.0
HANDLER_CALLS = 5000


@dataclass(frozen=True)
class ScanFigures:
    devices: int
    mean_ms: float
    p99_ms: float


def measure_scans(scan: Callable[[], DeviceTree]) -> ScanFigures:
    scan()
    samples = []
    for _ in range(SCANS):
        started = time.process_time()
        tree = scan()
        samples.append((time.process_time() - started) * 1000)
    devices = sum(len(d) for d in tree.values())
    return ScanFigures(devices, statistics.fmean(samples), _percentile(samples, 99))


def handler_cpu_us(plugin: Scanner, resource: str, ids: Sequence[str], workdir: Path) -> float:
    """CPU time of the plugin's part of one Allocate (hooks plus building the response message).

    Stable on a busy machine, unlike the wall-clock latency: it is the work the plugin adds.
    """
    devices = plugin.scan()[resource]
    server = ResourceServer(plugin, resource, FrameworkConfig(workdir / "dp-handler", workdir / "cdi"))
    started = time.process_time()
    for _ in range(HANDLER_CALLS):
        to_proto_allocation(server.allocate_container(devices, ids)).SerializeToString()
    return (time.process_time() - started) / HANDLER_CALLS * 1e6


def _percentile(samples: Sequence[float], percent: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _latencies(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1e6)
    return samples


@dataclass(frozen=True)
class Target:
    """One server to measure: how to make one call to it."""

    name: str
    call: Callable[[], Awaitable[object]]


async def interleaved_latencies(targets: Sequence[Target]) -> dict[str, tuple[float, float]]:
    """p50 and p99 per target; the targets take turns call by call.

    The machine is shared and its noise comes in bursts: taking turns call by call lets every burst
    hit all targets alike instead of whichever happened to be measured then.
    """
    for target in targets:
        await _latencies(target.call, WARMUP_CALLS)
    samples: dict[str, list[float]] = {target.name: [] for target in targets}
    for _ in range(CALLS):
        for target in targets:
            started = time.perf_counter()
            await target.call()
            samples[target.name].append((time.perf_counter() - started) * 1e6)
    return {name: (_percentile(values, 50), _percentile(values, 99)) for name, values in samples.items()}


def allocate_call(channel: grpc.aio.Channel, ids: Sequence[str]) -> Callable[[], Awaitable[object]]:
    """One Allocate for one container, as the kubelet sends it."""
    stub: pb_grpc.DevicePluginAsyncStub = pb_grpc.DevicePluginStub(channel)
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])

    async def call() -> object:
        return await stub.Allocate(request, timeout=10)

    return call


FLOOR_METHOD = "/bench.Floor/Empty"


def floor_call(channel: grpc.aio.Channel) -> Callable[[], Awaitable[object]]:
    empty = channel.unary_unary(FLOOR_METHOD, request_serializer=None, response_deserializer=None)

    async def call() -> object:
        return await empty(b"")

    return call


async def _empty(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return b""


async def serve_floor(socket_path: str) -> None:
    """The cheapest possible unary RPC: empty bytes in and out, no protobuf at all."""
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(_empty)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Empty": handler}),)
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    await server.wait_for_termination()


async def run(workdir: Path) -> str:
    qat_root = workdir / "qat-node"
    dlb_root = workdir / "dlb-node"
    build_node(parse_node_spec(QAT_NODE), qat_root)
    build_node(parse_node_spec(DLB_NODE), dlb_root)
    qat_scan = measure_scans(QatDpdkPlugin(QatPaths(qat_root), DpdkConfig()).scan)
    dlb_scan = measure_scans(DlbPlugin(dlb_root).scan)
    qat_handler = handler_cpu_us(
        QatDpdkPlugin(QatPaths(qat_root), DpdkConfig()), "cy", ["0000:10:00.1"], workdir
    )
    dlb_handler = handler_cpu_us(DlbPlugin(dlb_root), "vf", ["/dev/dlb1"], workdir)

    plugin_dir = workdir / "dp"
    common = ["-device-plugin-dir", str(plugin_dir), "-cdi-dir", str(workdir / "cdi")]
    qat_argv = [console_script("intel_qat_device_plugin"), "-prefix", str(qat_root), *common]
    dlb_argv = [console_script("intel_dlb_device_plugin"), "-prefix", str(dlb_root), *common]
    floor_argv = [sys.executable, __file__, "--floor-server", str(workdir / "floor.sock")]
    async with (
        KubeletStandIn(plugin_dir) as kubelet,
        plugin_process(qat_argv, workdir / "qat.log") as qat,
        plugin_process(dlb_argv, workdir / "dlb.log") as dlb,
        plugin_process(floor_argv, workdir / "floor.log"),
    ):
        await kubelet.wait_for(
            lambda: (
                bool(kubelet.resources().get("qat.intel.com/cy"))
                and bool(kubelet.resources().get("dlb.intel.com/vf"))
            ),
            timeout=30,
        )
        await asyncio.sleep(2)
        pids = {"qat": qat.process.pid, "dlb": dlb.process.pid}
        before, wall = {k: _cpu_seconds(pid) for k, pid in pids.items()}, time.monotonic()
        await asyncio.sleep(IDLE_SECONDS)
        elapsed = time.monotonic() - wall
        idle = {k: (_cpu_seconds(pid) - before[k]) / elapsed * 100 for k, pid in pids.items()}
        async with (
            grpc.aio.insecure_channel(f"unix:{workdir / 'floor.sock'}") as floor_channel,
            grpc.aio.insecure_channel(f"unix:{plugin_dir / 'qat.intel.com-cy.sock'}") as qat_channel,
            grpc.aio.insecure_channel(f"unix:{plugin_dir / 'dlb.intel.com-vf.sock'}") as dlb_channel,
        ):
            latency = await interleaved_latencies(
                [
                    Target("floor", floor_call(floor_channel)),
                    Target("qat", allocate_call(qat_channel, ["0000:10:00.1"])),
                    Target("dlb", allocate_call(dlb_channel, ["/dev/dlb1"])),
                ]
            )
        rss = {k: _peak_rss_mib(pid) for k, pid in pids.items()}

    lines = [
        "| Scan (in-process, CPU time per scan) | devices | mean | p99 |",
        "|---|---|---|---|",
    ]
    for label, scan in (("QAT DPDK, 4 PFs x 16 VFs", qat_scan), ("DLB, 4 PFs x 16 VFs + 2 PFs", dlb_scan)):
        lines.append(f"| {label} | {scan.devices} | {scan.mean_ms:.2f} ms | {scan.p99_ms:.2f} ms |")
    lines += [
        "",
        "| Allocate handler (in-process, CPU time per call, one device) | |",
        "|---|---|",
        f"| QAT (default allocation + QAT0 renumbering + response message) | {qat_handler:.1f} us |",
        f"| DLB (default allocation + response message) | {dlb_handler:.1f} us |",
    ]
    lines += [
        "",
        "| Process (1 s scan interval) | idle CPU | peak RSS | Allocate p50 | Allocate p99 | p99 / floor |",
        "|---|---|---|---|---|---|",
    ]
    floor_p99 = latency["floor"][1]
    for key, name in (("qat", "intel_qat_device_plugin"), ("dlb", "intel_dlb_device_plugin")):
        p50, p99 = latency[key]
        lines.append(
            f"| {name} | {idle[key]:.2f} % of a core | {rss[key]:.1f} MiB "
            f"| {p50:.0f} us | {p99:.0f} us | {p99 / floor_p99:.2f}x |"
        )
    p50, p99 = latency["floor"]
    lines.append(f"| floor: empty grpc.aio unary call | - | - | {p50:.0f} us | {p99:.0f} us | 1.00x |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--floor-server", metavar="SOCKET", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_server:
        asyncio.run(serve_floor(args.floor_server))
        return 0
    with tempfile.TemporaryDirectory(prefix="idp-bench-") as workdir:
        print(asyncio.run(run(Path(workdir))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
