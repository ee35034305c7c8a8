"""GPU plugin benchmarks: RPC latency against a floor, scan cost, idle CPU, reaction times, memory.

Run: ``.venv/bin/python bench/bench_gpu.py`` (about a minute). Prints a Markdown table for
``docs/performance.md``. Latencies are compared in the same run against an empty unary RPC served by
a separate grpc.aio process on the same kind of unix socket (the floor), because absolute times on a
shared machine drift.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import grpc.aio

from intel_device_plugins.plugins.gpu.discovery import GpuOptions, scan_gpus
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import PluginProcess, console_script, plugin_process

CARDS = 16
NODE = f"""
[node]
numa_nodes = 2
[[gpu]]
count = {CARDS // 2}
numa_node = 0
mei = true
[[gpu]]
count = {CARDS // 2}
numa_node = 1
"""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


FLOOR_METHOD = "/bench.Floor/Empty"


async def _empty(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return b""


async def serve_floor(socket_path: str) -> None:
    """The cheapest possible unary RPC: raw empty bytes in and out, no protobuf at all."""
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(_empty)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Empty": handler}),)
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    await server.wait_for_termination()


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def wait_until(condition: Callable[[], bool], timeout: float = 10) -> float:
    """Seconds until ``condition()`` holds, polling every millisecond."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise TimeoutError
        await asyncio.sleep(0.001)
    return time.perf_counter() - started


async def timed_calls(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def rpc_latency(
    kubelet: KubeletStandIn, floor_socket: Path, rounds: int, per_round: int
) -> dict[str, float]:
    ids = ["card0-0"]
    allocate_samples: list[float] = []
    floor_samples: list[float] = []
    async with grpc.aio.insecure_channel(f"unix:{floor_socket}") as channel:
        floor = channel.unary_unary(FLOOR_METHOD, request_serializer=None, response_deserializer=None)

        async def empty_call() -> object:
            return await floor(b"")

        for _ in range(rounds):  # interleaved, so drift hits both equally
            floor_samples += await timed_calls(empty_call, per_round)
            allocate_samples += await timed_calls(
                lambda: kubelet.allocate("gpu.intel.com/i915", ids), per_round
            )
    return {
        "floor_p50": percentile(floor_samples, 0.5),
        "floor_p99": percentile(floor_samples, 0.99),
        "allocate_p50": percentile(allocate_samples, 0.5),
        "allocate_p99": percentile(allocate_samples, 0.99),
    }


def scan_cost(root: Path, repeats: int) -> float:
    options = GpuOptions(shared_dev_num=2, enable_monitoring=True)
    scan_gpus(str(root), options)
    started = time.process_time()
    for _ in range(repeats):
        result = scan_gpus(str(root), options)
    elapsed = time.process_time() - started
    assert len(result.tree["i915"]) == 2 * CARDS
    return elapsed / repeats


async def reaction_times(
    kubelet: KubeletStandIn, node_root: Path, plugin_dir: Path, repeats: int
) -> dict[str, float]:
    tree = FakeTree(node_root, numa_nodes=2)

    def i915_count() -> int:
        return len(kubelet.resources()["gpu.intel.com/i915"])

    hotplug: list[float] = []
    for _ in range(repeats):
        count = i915_count()
        card = gpu.add_card(tree, numa_node=1)
        hotplug.append(await wait_until(lambda: i915_count() > count))  # noqa: B023 - awaited at once
        gpu.remove_card(tree, card.index)
        await wait_until(lambda: i915_count() == count)  # noqa: B023
    reregister: list[float] = []
    for _ in range(repeats):
        before = len(kubelet.registrations)
        (plugin_dir / "gpu.intel.com-i915.sock").unlink()
        reregister.append(await wait_until(lambda: len(kubelet.registrations) > before))  # noqa: B023
    return {
        "hotplug_p50": statistics.median(hotplug),
        "hotplug_max": max(hotplug),
        "reregister_p50": statistics.median(reregister),
        "reregister_max": max(reregister),
    }


async def idle_cpu(process: PluginProcess, seconds: float) -> float:
    pid = process.process.pid
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


async def main(idle_seconds: float, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as workdir:
        work = Path(workdir)
        node_root = work / "node"
        build_node(parse_node_spec(NODE), node_root)
        plugin_dir = work / "dp"
        floor_socket = work / "floor.sock"
        floor = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve-floor", str(floor_socket)
        )
        command = [
            console_script("intel_gpu_device_plugin"),
            "-prefix", str(node_root),
            "-device-plugin-dir", str(plugin_dir),
            "-cdi-dir", str(work / "cdi"),
            "-shared-dev-num", "2",
            "-enable-monitoring",
        ]  # fmt: skip
        try:
            async with (
                KubeletStandIn(plugin_dir) as kubelet,
                plugin_process(command, work / "plugin.log") as plugin,
            ):
                start_to_registered = await wait_until(
                    lambda: len(kubelet.resources().get("gpu.intel.com/i915", {})) == 2 * CARDS,
                    timeout=30,
                )
                await wait_until(floor_socket.exists)
                latency = await rpc_latency(kubelet, floor_socket, rounds, 200)
                idle = await idle_cpu(plugin, idle_seconds)
                reactions = await reaction_times(kubelet, node_root, plugin_dir, 10)
                rss = peak_rss_mib(plugin.process.pid)
        finally:
            floor.terminate()
            await floor.wait()
        per_scan = scan_cost(node_root, 200)
    ratio = latency["allocate_p99"] / latency["floor_p99"]

    def pair(first: float, second: float, unit: float = 1e3, digits: int = 3) -> str:
        return f"{first * unit:.{digits}f} / {second * unit:.{digits}f} ms"

    r = reactions
    rows = [
        ("Allocate round trip p50 / p99", pair(latency["allocate_p50"], latency["allocate_p99"])),
        ("Floor (empty unary RPC) p50 / p99", pair(latency["floor_p50"], latency["floor_p99"])),
        ("Allocate p99 / floor p99", f"{ratio:.2f}x (target <= 1.5x)"),
        (f"One scan of a {CARDS}-card node (CPU)", f"{per_scan * 1e3:.2f} ms (target <= 2 ms)"),
        (f"Idle CPU over {idle_seconds:.0f} s, 1 s interval", f"{idle * 100:.2f} % of a core (<= 0.5 %)"),
        ("Hot-plug to ListAndWatch update p50 / max", pair(r["hotplug_p50"], r["hotplug_max"], 1e3, 0)),
        ("Socket deleted to re-registered p50 / max", pair(r["reregister_p50"], r["reregister_max"], 1e3, 0)),
        ("Start to registered with all devices", f"{start_to_registered * 1e3:.0f} ms (target <= 1500 ms)"),
        (f"Peak RSS, {CARDS} cards", f"{rss:.1f} MiB (target <= 45 MiB)"),
    ]  # fmt: skip
    print("| Measure | Result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--serve-floor", metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 200 calls each")
    args = parser.parse_args()
    if args.serve_floor:
        asyncio.run(serve_floor(args.serve_floor))
    else:
        asyncio.run(main(args.idle_seconds, args.rounds))
