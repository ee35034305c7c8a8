"""Shared measurement code for the per-plugin benchmarks in this directory.

A per-plugin benchmark is a :class:`PluginBench` (node, plugin command, resource to allocate) handed
to :func:`main`. For each one this module measures, all on this machine in a temporary directory:

- **scan + diff CPU**: process CPU time of one ``scan()`` of every plugin the command builds, plus
  the diff against the previous tree: what one scan tick costs on the event loop (in process).
- **plugin-side Allocate work**: CPU time of the allocation logic, hooks and protobuf message for
  one Allocate (in process), i.e. what the plugin adds to the transport.
- the plugin as a **real process** registered with the kubelet stand-in: **start to registered**
  (spawn to every device advertised), **idle CPU** with default flags, **Allocate
  latency** against the floors, **server CPU per call**, **hot-plug to ListAndWatch update** (where
  the simulator can add a device), **socket deletion to re-registration**, and **peak RSS**
  (``VmHWM``) at the end.

The floor is the cheapest unary call over the same transport: a grpc.aio server in its own process
answering raw empty bytes on a unix socket in the same directory. The protobuf floor is a second
such process answering ``/v1beta1.DevicePlugin/Allocate`` with a fixed one-device response, i.e.
what any Python Allocate costs before a plugin does anything. Plugin, floor and protobuf floor take
turns call by call, so bursts of load from elsewhere on the shared machine hit all three alike.

Run as ``python bench/plugin_bench.py --floor <socket>`` this file is that floor server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from intel_device_plugins.deviceplugin.model import DeviceTree, diff_trees
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.server import FrameworkConfig, ResourceServer, to_proto_allocation
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import PluginProcess, console_script, plugin_process
from intel_device_plugins.sim.uevents import UeventBroadcaster
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2_grpc as pb_grpc

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# ----- reading /proc ---------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (``/proc/<pid>/stat``, 10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_seconds(pid: int) -> float:
    """CPU time of all threads of a process so far, to the nanosecond (``/proc/<pid>/task/*/schedstat``).

    Idle figures are a few milliseconds over many seconds: 10 ms ticks would round them to
    nothing or to 0.07 %. A thread that ended before the second reading drops out of the sum, so a
    process that starts and ends threads while measured reads low; plugin processes keep theirs.
    Falls back to :func:`cpu_seconds` where schedstat is missing.
    """
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
    except FileNotFoundError:
        return cpu_seconds(pid)
    return total / 1e9 if total else cpu_seconds(pid)


def status_mib(pid: int, name: str) -> float:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``...) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib(pid: int) -> float:
    return status_mib(pid, "VmHWM")


def rss_mib(pid: int) -> float:
    return status_mib(pid, "VmRSS")


def pss_mib(pid: int) -> float:
    """Proportional set size: resident memory with pages shared between processes split among them."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class LoadAverage:
    """1-minute load average, sampled at the start, between phases and at the end of a run."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.sample()

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])

    def text(self) -> str:
        return f"{min(self.samples):.1f} to {max(self.samples):.1f}"


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until ``condition()`` holds, polling every millisecond."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.001)
    return time.perf_counter() - started


async def idle_cpu_percent(pids: Mapping[str, int], seconds: float) -> dict[str, float]:
    """CPU time of each process over ``seconds`` of wall time, as a percentage of one core."""
    before = {name: run_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - started
    return {name: (run_seconds(pid) - before[name]) / elapsed * 100 for name, pid in pids.items()}


# ----- in-process costs ------------------------------------------------------------------------


def plugins_from_cli(cli_module: str, argv: Sequence[str]) -> Sequence[Scanner]:
    """The plugins a console script builds from ``argv``, built the same way in this process."""
    module = importlib.import_module(cli_module)
    plugins: Sequence[Scanner] = module.build_plugins(module.build_parser().parse_args(list(argv)))
    return plugins


def advertised(plugins: Sequence[Scanner]) -> dict[str, int]:
    """Full resource name → number of devices, for every non-empty resource of ``plugins``."""
    counts: dict[str, int] = {}
    for plugin in plugins:
        for name, devices in plugin.scan().items():
            if devices:
                counts[f"{plugin.namespace}/{name}"] = len(devices)
    return counts


@dataclass(frozen=True)
class ScanCost:
    mean_ms: float
    p99_ms: float
    devices: int


def scan_cost(plugins: Sequence[Scanner], iterations: int = 300) -> ScanCost:
    """CPU time of one scan plus the diff against the previous tree, summed over ``plugins``."""
    previous: list[DeviceTree] = [plugin.scan() for plugin in plugins]
    samples = []
    for _ in range(iterations):
        started = time.process_time()
        for index, plugin in enumerate(plugins):
            tree = plugin.scan()
            diff_trees(previous[index], tree)
            previous[index] = tree
        samples.append((time.process_time() - started) * 1000)
    devices = sum(len(devices) for tree in previous for devices in tree.values())
    return ScanCost(statistics.fmean(samples), percentile(samples, 0.99), devices)


def allocation_cost_us(
    plugins: Sequence[Scanner], resource: str, ids: Sequence[str], iterations: int = 3000
) -> float:
    """CPU time of the plugin's part of one Allocate: allocation, hooks, building and serialising."""
    namespace, name = resource.split("/", 1)
    plugin = next(p for p in plugins if p.namespace == namespace and name in p.scan())
    server = ResourceServer(plugin, name, FrameworkConfig(Path("/nonexistent"), Path("/nonexistent")))
    devices = plugin.scan()[name]
    started = time.process_time()
    for _ in range(iterations):
        to_proto_allocation(server.allocate_container(devices, ids)).encode()
    return (time.process_time() - started) / iterations * 1e6


# ----- the floors ------------------------------------------------------------------------------

FLOOR_METHOD = "/bench.Floor/Empty"

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


async def _empty(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return b""


async def _fixed_allocate(request: pb.AllocateRequest, context: object) -> pb.AllocateResponse:
    return PROTO_FLOOR_RESPONSE


async def serve_floor(socket_path: str) -> None:
    """``/bench.Floor/Empty`` (raw bytes) and ``/v1beta1.DevicePlugin/Allocate`` (fixed answer)."""
    server = grpc.aio.server()
    proto_handler = grpc.unary_unary_rpc_method_handler(
        _fixed_allocate,
        request_deserializer=pb.AllocateRequest.FromString,
        response_serializer=pb.AllocateResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "bench.Floor", {"Empty": grpc.unary_unary_rpc_method_handler(_empty)}
            ),
            grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {"Allocate": proto_handler}),
        )
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    await server.wait_for_termination()


@contextlib.asynccontextmanager
async def floor_process(socket_path: Path, log_path: Path) -> AsyncIterator[PluginProcess]:
    """A floor server in its own process, once its socket exists."""
    command = [sys.executable, str(Path(__file__)), "--floor", str(socket_path)]
    async with plugin_process(command, log_path) as floor:
        await wait_until(socket_path.exists, timeout=30)
        yield floor


# ----- interleaved latency ---------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One server to measure: how to make one call, and the process that serves it."""

    name: str
    call: Callable[[], Awaitable[object]]
    pid: int
    idle_cpu_percent: float = 0.0
    """Background CPU of the server, subtracted from its CPU per call (the plugin keeps scanning)."""


@dataclass(frozen=True)
class Latency:
    p50_us: float
    p99_us: float
    server_cpu_us: float


async def interleaved_latencies(
    targets: Sequence[Target], calls: int, warmup: int = 200
) -> dict[str, Latency]:
    """p50 and p99 per target, taking turns call by call, and server CPU time per call.

    The machine is shared and its noise comes in bursts: taking turns call by call lets every burst
    hit all targets alike instead of whichever happened to be measured then. Server CPU per call
    (the serving process's CPU time over the whole loop, less its idle rate, divided by its calls)
    does not depend on load elsewhere.
    """
    for target in targets:
        for _ in range(warmup):
            await target.call()
    samples: dict[str, list[float]] = {target.name: [] for target in targets}
    cpu_before = {target.name: cpu_seconds(target.pid) for target in targets}
    started = time.monotonic()
    for _ in range(calls):
        for target in targets:
            call_started = time.perf_counter()
            await target.call()
            samples[target.name].append((time.perf_counter() - call_started) * 1e6)
    elapsed = time.monotonic() - started
    result = {}
    for target in targets:
        busy = cpu_seconds(target.pid) - cpu_before[target.name] - target.idle_cpu_percent / 100 * elapsed
        values = samples[target.name]
        result[target.name] = Latency(percentile(values, 0.5), percentile(values, 0.99), busy / calls * 1e6)
    return result


def allocate_call(channel: grpc.aio.Channel, ids: Sequence[str]) -> Callable[[], Awaitable[object]]:
    """One Allocate for one container, as the kubelet sends it."""
    stub: pb_grpc.DevicePluginAsyncStub = pb_grpc.DevicePluginStub(channel)
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])

    async def call() -> object:
        return await stub.Allocate(request, timeout=10)

    return call


def floor_call(channel: grpc.aio.Channel) -> Callable[[], Awaitable[object]]:
    empty = channel.unary_unary(FLOOR_METHOD, request_serializer=None, response_deserializer=None)

    async def call() -> object:
        return await empty(b"", timeout=10)

    return call


# ----- one plugin process ----------------------------------------------------------------------


@dataclass(frozen=True)
class HotPlug:
    """Add one device to the simulated node; the returned function removes it again."""

    resource: str
    add: Callable[[FakeTree], Callable[[], None]]


@dataclass(frozen=True)
class Reaction:
    p50_ms: float
    max_ms: float


@dataclass(frozen=True)
class ProcessFigures:
    start_to_registered_ms: float
    idle_cpu_percent: float
    floor_idle_cpu_percent: float
    """Idle CPU of the floor server (an empty grpc.aio server) over the same window."""
    plugin: Latency
    floor: Latency
    proto_floor: Latency
    hotplug: Reaction | None
    reregistration: Reaction
    peak_rss_mib: float

    @property
    def ratio_p50(self) -> float:
        return self.plugin.p50_us / self.floor.p50_us

    @property
    def ratio_p99(self) -> float:
        return self.plugin.p99_us / self.floor.p99_us


def _reaction(samples: Sequence[float]) -> Reaction:
    return Reaction(statistics.median(samples) * 1e3, max(samples) * 1e3)


async def hotplug_times(kubelet: KubeletStandIn, tree: FakeTree, hotplug: HotPlug, repeats: int) -> Reaction:
    """Device added to the node → the kubelet's ListAndWatch shows it (then removed, and waited for)."""

    def count() -> int:
        return len(kubelet.resources().get(hotplug.resource, {}))

    samples = []
    for _ in range(repeats):
        before = count()
        remove = hotplug.add(tree)
        samples.append(await wait_until(lambda: count() > before))  # noqa: B023 - awaited at once
        remove()
        await wait_until(lambda: count() == before)  # noqa: B023
    return _reaction(samples)


async def reregistration_times(
    kubelet: KubeletStandIn, plugin_dir: Path, resource: str, repeats: int
) -> Reaction:
    """The plugin's socket deleted (as a kubelet restart does) → the plugin registered again."""
    endpoint = next(e for r, e in reversed(kubelet.registrations) if r == resource)
    samples = []
    for _ in range(repeats):
        before = len(kubelet.registrations)
        (plugin_dir / endpoint).unlink()
        samples.append(await wait_until(lambda: len(kubelet.registrations) > before))  # noqa: B023
        await kubelet.wait_for(lambda: kubelet.allocatable(resource) > 0, timeout=10)
    return _reaction(samples)


def all_advertised(kubelet: KubeletStandIn, expected: Mapping[str, int]) -> bool:
    resources = kubelet.resources()
    return all(len(resources.get(name, {})) == count for name, count in expected.items())


async def measure_process(
    command: Sequence[str],
    workdir: Path,
    plugin_dir: Path,
    expected: Mapping[str, int],
    resource: str,
    ids: Sequence[str],
    *,
    tree: FakeTree,
    hotplug: HotPlug | None,
    load: LoadAverage,
    idle_seconds: float,
    calls: int,
    repeats: int = 10,
) -> ProcessFigures:
    """Start the plugin, wait for registration, then idle CPU, latency, reactions and peak RSS."""
    async with (
        KubeletStandIn(plugin_dir) as kubelet,
        floor_process(workdir / "floor.sock", workdir / "floor.log") as floor,
        floor_process(workdir / "proto-floor.sock", workdir / "proto-floor.log") as proto_floor,
    ):
        started = time.perf_counter()
        async with plugin_process(command, workdir / "plugin.log") as plugin:
            await wait_until(lambda: all_advertised(kubelet, expected), timeout=60)
            start_to_registered = time.perf_counter() - started
            pid = plugin.process.pid
            await asyncio.sleep(2)
            load.sample()
            idle_both = await idle_cpu_percent({"plugin": pid, "floor": floor.process.pid}, idle_seconds)
            idle = idle_both["plugin"]
            load.sample()
            endpoint = next(e for r, e in reversed(kubelet.registrations) if r == resource)
            async with (
                grpc.aio.insecure_channel(f"unix:{plugin_dir / endpoint}") as plugin_channel,
                grpc.aio.insecure_channel(f"unix:{workdir / 'floor.sock'}") as floor_channel,
                grpc.aio.insecure_channel(f"unix:{workdir / 'proto-floor.sock'}") as proto_channel,
            ):
                latency = await interleaved_latencies(
                    [
                        Target("plugin", allocate_call(plugin_channel, ids), pid, idle),
                        Target("floor", floor_call(floor_channel), floor.process.pid),
                        Target("proto", allocate_call(proto_channel, ["accel0"]), proto_floor.process.pid),
                    ],
                    calls,
                )
            load.sample()
            plugged = None if hotplug is None else await hotplug_times(kubelet, tree, hotplug, repeats)
            reregistered = await reregistration_times(kubelet, plugin_dir, resource, repeats)
            rss = peak_rss_mib(pid)
            load.sample()
    return ProcessFigures(
        start_to_registered_ms=start_to_registered * 1e3,
        idle_cpu_percent=idle,
        floor_idle_cpu_percent=idle_both["floor"],
        plugin=latency["plugin"],
        floor=latency["floor"],
        proto_floor=latency["proto"],
        hotplug=plugged,
        reregistration=reregistered,
        peak_rss_mib=rss,
    )


# ----- targets and the report ------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """The project's targets (set for the 16-card GPU node, held to for every plugin)."""

    p99_ratio: float = 1.5
    scan_ms: float | None = None
    idle_percent: float = 0.5
    reaction_ms: float = 1000.0
    hotplug_ms: float | None = None
    """Hot-plug target when tighter than ``reaction_ms``."""
    start_ms: float = 1500.0
    peak_rss_mib: float = 45.0


def _verdict(value: float, limit: float | None, text: str) -> str:
    if limit is None:
        return "—"
    return f"{text} {'met' if value <= limit else '**missed**'}"


def report(
    title: str, scan: ScanCost, allocation_us: float, figures: ProcessFigures, targets: Targets
) -> str:
    f, t = figures, targets
    rows = [
        ("devices advertised", f"{scan.devices}", "—"),
        (
            "scan + diff CPU, mean / p99",
            f"{scan.mean_ms:.2f} ms / {scan.p99_ms:.2f} ms",
            _verdict(scan.mean_ms, t.scan_ms, f"≤ {t.scan_ms} ms:"),
        ),
        (
            "idle CPU, default flags (empty grpc.aio server, same window)",
            f"{f.idle_cpu_percent:.3f} % ({f.floor_idle_cpu_percent:.3f} %) of a core",
            _verdict(f.idle_cpu_percent, t.idle_percent, f"≤ {t.idle_percent} %:"),
        ),
        (
            "peak RSS (VmHWM)",
            f"{f.peak_rss_mib:.1f} MiB",
            _verdict(f.peak_rss_mib, t.peak_rss_mib, "≤ 45 MiB:"),
        ),
        (
            "start to registered, all devices",
            f"{f.start_to_registered_ms:.0f} ms",
            _verdict(f.start_to_registered_ms, t.start_ms, f"≤ {t.start_ms:.0f} ms:"),
        ),
        ("Allocate p50 / p99", f"{f.plugin.p50_us:.0f} µs / {f.plugin.p99_us:.0f} µs", "—"),
        ("floor (empty grpc.aio unary) p50 / p99", f"{f.floor.p50_us:.0f} µs / {f.floor.p99_us:.0f} µs", "—"),
        (
            "Allocate / floor, p50 and p99",
            f"{f.ratio_p50:.2f}x and {f.ratio_p99:.2f}x",
            _verdict(f.ratio_p99, t.p99_ratio, f"p99 ≤ {t.p99_ratio}x:"),
        ),
        (
            "protobuf floor (fixed one-device Allocate) p50 / p99",
            f"{f.proto_floor.p50_us:.0f} µs / {f.proto_floor.p99_us:.0f} µs",
            "—",
        ),
        (
            "server CPU per call: plugin / protobuf floor / floor",
            f"{f.plugin.server_cpu_us:.0f} / {f.proto_floor.server_cpu_us:.0f}"
            f" / {f.floor.server_cpu_us:.0f} µs",
            "—",
        ),
        ("plugin-side Allocate work (in process)", f"{allocation_us:.0f} µs", "—"),
    ]
    if f.hotplug is not None:
        rows.append(
            (
                "hot-plug to ListAndWatch update, p50 / max",
                f"{f.hotplug.p50_ms:.0f} / {f.hotplug.max_ms:.0f} ms",
                _verdict(
                    f.hotplug.max_ms,
                    t.hotplug_ms or t.reaction_ms,
                    f"≤ {t.hotplug_ms or t.reaction_ms:.0f} ms:",
                ),
            )
        )
    rows.append(
        (
            "socket deleted to re-registered, p50 / max",
            f"{f.reregistration.p50_ms:.0f} / {f.reregistration.max_ms:.0f} ms",
            _verdict(f.reregistration.max_ms, t.reaction_ms, f"≤ {t.reaction_ms:.0f} ms:"),
        )
    )
    lines = [f"### {title}", "", "| figure | value | target |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {target} |" for name, value, target in rows]
    return "\n".join(lines)


# ----- one benchmark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginBench:
    """One plugin on one simulated node."""

    title: str
    script: str
    """Console script, e.g. ``intel_gpu_device_plugin``."""
    cli_module: str
    """Module with ``build_parser()`` and ``build_plugins(args)`` for that script."""
    node: str
    """Node spec (TOML) for the simulator."""
    resource: str
    ids: Sequence[str]
    """Device IDs of one Allocate."""
    flags: Sequence[str] = ()
    prepare: Callable[[FakeTree], None] | None = None
    """Extra changes to the node after building it."""
    hotplug: HotPlug | None = None
    targets: Targets = field(default_factory=Targets)


async def run_bench(
    bench: PluginBench, workdir: Path, load: LoadAverage, idle_seconds: float, calls: int
) -> str:
    root, plugin_dir = workdir / "node", workdir / "dp"
    tree = build_node(parse_node_spec(bench.node), root)
    if bench.prepare is not None:
        bench.prepare(tree)
    # The simulator announces hot-plugs as the kernel would, to plugins that listen for uevents.
    tree.uevents = UeventBroadcaster(workdir / "uevents")
    argv = [
        "-prefix", str(root),
        "-device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(workdir / "cdi"),
        "-uevent-dir", str(workdir / "uevents"),
        *bench.flags,
    ]  # fmt: skip
    plugins = plugins_from_cli(bench.cli_module, argv)
    expected = advertised(plugins)
    scan = scan_cost(plugins)
    allocation = allocation_cost_us(plugins, bench.resource, bench.ids)
    load.sample()
    figures = await measure_process(
        [console_script(bench.script), *argv],
        workdir,
        plugin_dir,
        expected,
        bench.resource,
        bench.ids,
        tree=tree,
        hotplug=bench.hotplug,
        load=load,
        idle_seconds=idle_seconds,
        calls=calls,
    )
    return report(bench.title, scan, allocation, figures, bench.targets)


def header(command: str, load: LoadAverage, seconds: float) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"Command: `{command}` — run {now}, {seconds:.0f} s; {os.cpu_count()} cores,"
        f" Python {platform.python_version()}; 1-minute load average {load.text()} during the run."
    )


def main(*benches: PluginBench, argv: Sequence[str] | None = None) -> int:
    """Entry point of a per-plugin script: measure ``benches`` in turn and print Markdown."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__)
    parser.add_argument("--idle-seconds", type=float, default=15.0, help="idle CPU window (default 15)")
    parser.add_argument("--calls", type=int, default=5000, help="Allocate calls per target (default 5000)")
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    load = LoadAverage()
    started = time.monotonic()
    sections = []
    for bench in benches:
        with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
            sections.append(asyncio.run(run_bench(bench, Path(workdir), load, args.idle_seconds, args.calls)))
    load.sample()
    print(header(command, load, time.monotonic() - started))
    print()
    print("\n\n".join(sections))
    return 0


def _serve_floor_main() -> None:
    parser = argparse.ArgumentParser(description="serve the benchmark floor on a unix socket")
    parser.add_argument("--floor", required=True, metavar="SOCKET")
    asyncio.run(serve_floor(parser.parse_args().floor))


if __name__ == "__main__":
    _serve_floor_main()
