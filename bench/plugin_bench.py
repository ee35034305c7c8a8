"""Measuring a device plugin: scan CPU time, idle CPU, peak RSS, Allocate latency against a floor.

Used by ``bench_dsa.py``, ``bench_sgx.py`` and ``bench_npu.py``. The floor is the cheapest possible
unary call over the same transport: a grpc.aio server in its own process answering raw empty bytes,
on a unix socket in the same directory (the same floor as ``bench_gpu.py``). Calls to
the plugin and to the floor alternate in rounds so that load from elsewhere on the machine hits both.

Run as ``python bench/plugin_bench.py --floor <socket>`` it is that floor server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from intel_device_plugins.deviceplugin.model import DeviceTree, diff_trees
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.server import FrameworkConfig, ResourceServer, to_proto_allocation
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.process import PluginProcess, plugin_process

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(frozen=True)
class ScanCost:
    mean_ms: float
    p99_ms: float
    devices: int


def scan_cost(scan: Callable[[], DeviceTree], iterations: int) -> ScanCost:
    """CPU time of one scan plus the diff against the previous tree (what every tick costs)."""
    previous = scan()
    samples = []
    for _ in range(iterations):
        start = time.process_time()
        tree = scan()
        diff_trees(previous, tree)
        samples.append((time.process_time() - start) * 1000)
        previous = tree
    devices = sum(len(devices) for devices in previous.values())
    return ScanCost(statistics.fmean(samples), percentile(samples, 0.99), devices)


def allocation_cost_us(plugin: Scanner, resource: str, ids: Sequence[str], iterations: int = 2000) -> float:
    """CPU time of the plugin-side work of one Allocate (allocation logic plus protobuf conversion)."""
    server = ResourceServer(plugin, resource, FrameworkConfig(device_plugin_dir=Path("/nonexistent")))
    devices = plugin.scan()[resource]
    start = time.process_time()
    for _ in range(iterations):
        to_proto_allocation(server.allocate_container(devices, ids))
    return (time.process_time() - start) / iterations * 1e6


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


FLOOR_SERVICE, FLOOR_RPC = "bench.Floor", "Empty"


async def _empty(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return b""


PROTO_FLOOR_RESPONSE = pb.AllocateResponse(
    container_responses=[
        pb.ContainerAllocateResponse(
            devices=[
                pb.DeviceSpec(
                    container_path="/dev/accel/accel0", host_path="/dev/accel/accel0", permissions="rw"
                )
            ]
        )
    ]
)


async def _fixed_allocate(request: pb.AllocateRequest, context: object) -> pb.AllocateResponse:
    return PROTO_FLOOR_RESPONSE


async def serve_floor(socket_path: str) -> None:
    """Two floors in one process.

    ``/bench.Floor/Empty``: the cheapest unary RPC there is, raw empty bytes in and out (the floor
    of ``bench_gpu.py``). ``/v1beta1.DevicePlugin/Allocate``: the same RPC with protobuf decoding
    of the request and a fixed one-device response, i.e. what any Python Allocate costs before the
    plugin does anything.
    """
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(_empty)
    proto_handler = grpc.unary_unary_rpc_method_handler(
        _fixed_allocate,
        request_deserializer=pb.AllocateRequest.FromString,
        response_serializer=pb.AllocateResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(FLOOR_SERVICE, {FLOOR_RPC: handler}),
            grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {"Allocate": proto_handler}),
        )
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    await server.wait_for_termination()


@contextlib.asynccontextmanager
async def floor_process(socket_path: Path, log_path: Path) -> AsyncIterator[PluginProcess]:
    command = [sys.executable, str(Path(__file__)), "--floor", str(socket_path)]
    async with plugin_process(command, log_path) as floor:
        for _ in range(200):
            if await asyncio.to_thread(socket_path.exists):
                break
            await asyncio.sleep(0.05)
        yield floor


async def _time_calls(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


@dataclass(frozen=True)
class ProcessFigures:
    idle_cpu_percent: float
    peak_rss_mib: float
    allocate_p50_us: float
    allocate_p99_us: float
    floor_p50_us: float
    floor_p99_us: float
    proto_floor_p50_us: float
    proto_floor_p99_us: float
    server_cpu_us: float
    """Server-process CPU time per Allocate: independent of load elsewhere on the machine."""
    floor_server_cpu_us: float
    proto_floor_server_cpu_us: float

    @property
    def ratio_p99(self) -> float:
        return self.allocate_p99_us / self.floor_p99_us

    @property
    def ratio_p50(self) -> float:
        return self.allocate_p50_us / self.floor_p50_us


async def measure_process(
    command: Sequence[str],
    workdir: Path,
    plugin_dir: Path,
    socket_name: str,
    resource: str,
    ids: Sequence[str],
    *,
    idle_seconds: float = 15.0,
    calls: int = 4000,
    rounds: int = 40,
) -> ProcessFigures:
    """Start the plugin, let it settle, measure idle CPU, then Allocate latency against the floor."""
    async with (
        KubeletStandIn(plugin_dir) as kubelet,
        plugin_process(command, workdir / "plugin.log") as plugin,
    ):
        await kubelet.wait_for(lambda: kubelet.allocatable(resource) > 0, timeout=60)
        await asyncio.sleep(2)
        pid = plugin.process.pid
        cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(idle_seconds)
        idle = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - wall_before) * 100
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        floor_socket = plugin_dir / "floor.sock"
        async with (
            floor_process(floor_socket, workdir / "floor.log") as floor,
            grpc.aio.insecure_channel(f"unix:{plugin_dir / socket_name}") as plugin_channel,
            grpc.aio.insecure_channel(f"unix:{floor_socket}") as floor_channel,
        ):
            plugin_stub = pb_grpc.DevicePluginStub(plugin_channel)
            floor_rpc = floor_channel.unary_unary(
                f"/{FLOOR_SERVICE}/{FLOOR_RPC}", request_serializer=None, response_deserializer=None
            )

            async def allocate() -> object:
                return await plugin_stub.Allocate(request, timeout=10)

            async def empty() -> object:
                return await floor_rpc(b"", timeout=10)

            proto_floor_stub = pb_grpc.DevicePluginStub(floor_channel)

            async def proto_floor() -> object:
                return await proto_floor_stub.Allocate(request, timeout=10)

            await _time_calls(allocate, 100)
            await _time_calls(empty, 100)
            await _time_calls(proto_floor, 100)
            plugin_samples: list[float] = []
            floor_samples: list[float] = []
            proto_samples: list[float] = []
            plugin_cpu = floor_cpu = proto_cpu = 0.0
            for _ in range(rounds):  # interleaved, so load from elsewhere hits both alike
                before = cpu_seconds(pid)
                plugin_samples += await _time_calls(allocate, calls // rounds)
                plugin_cpu += cpu_seconds(pid) - before
                before = cpu_seconds(floor.process.pid)
                floor_samples += await _time_calls(empty, calls // rounds)
                floor_cpu += cpu_seconds(floor.process.pid) - before
                before = cpu_seconds(floor.process.pid)
                proto_samples += await _time_calls(proto_floor, calls // rounds)
                proto_cpu += cpu_seconds(floor.process.pid) - before
        rss = peak_rss_mib(pid)
    return ProcessFigures(
        idle_cpu_percent=idle,
        peak_rss_mib=rss,
        server_cpu_us=plugin_cpu / len(plugin_samples) * 1e6,
        floor_server_cpu_us=floor_cpu / len(floor_samples) * 1e6,
        proto_floor_server_cpu_us=proto_cpu / len(proto_samples) * 1e6,
        proto_floor_p50_us=percentile(proto_samples, 0.5),
        proto_floor_p99_us=percentile(proto_samples, 0.99),
        allocate_p50_us=percentile(plugin_samples, 0.5),
        allocate_p99_us=percentile(plugin_samples, 0.99),
        floor_p50_us=percentile(floor_samples, 0.5),
        floor_p99_us=percentile(floor_samples, 0.99),
    )


def report(title: str, scan: ScanCost, figures: ProcessFigures, allocation_us: float) -> str:
    return "\n".join(
        [
            f"### {title}",
            "",
            "| figure | value |",
            "|---|---|",
            f"| devices advertised | {scan.devices} |",
            f"| scan + diff CPU time, mean / p99 | {scan.mean_ms:.2f} ms / {scan.p99_ms:.2f} ms |",
            f"| idle CPU (scan every 1 s) | {figures.idle_cpu_percent:.2f} % of one core |",
            f"| peak RSS | {figures.peak_rss_mib:.1f} MiB |",
            f"| Allocate p50 / p99 | {figures.allocate_p50_us:.0f} µs / {figures.allocate_p99_us:.0f} µs |",
            f"| floor (empty grpc.aio unary) p50 / p99 | {figures.floor_p50_us:.0f} µs"
            f" / {figures.floor_p99_us:.0f} µs |",
            f"| Allocate / floor, p50 and p99 | {figures.ratio_p50:.2f}x and {figures.ratio_p99:.2f}x |",
            f"| protobuf floor (fixed one-device answer) p50 / p99 | {figures.proto_floor_p50_us:.0f} µs"
            f" / {figures.proto_floor_p99_us:.0f} µs |",
            f"| server CPU per call: plugin / protobuf floor / floor | {figures.server_cpu_us:.0f} µs"
            f" / {figures.proto_floor_server_cpu_us:.0f} µs / {figures.floor_server_cpu_us:.0f} µs |",
            f"| plugin-side Allocate work (CPU, in process) | {allocation_us:.0f} µs |",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--floor", required=True, help="serve the floor on this unix socket")
    args = parser.parse_args()
    asyncio.run(serve_floor(args.floor))


if __name__ == "__main__":
    main()
