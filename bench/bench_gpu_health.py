"""GPU plugin health: what it costs at idle, and how fast a fault reaches the kubelet.

On the simulator's default node (its GPUs only), four ``intel_gpu_device_plugin`` processes run side by
side, each with its own kubelet stand-in and all hearing the same uevents (``-uevent-dir``):

- ``off``: no health flag (device nodes only);
- ``kernel``: ``-kernel-health`` (AER, driver binding, i915 error state, xe hwmon; a rescan every 5 s);
- ``xpumd``: ``-xpumd-endpoint`` to a simulated xpumd process (``intel-sim-xpumd``, a snapshot every 5 s
  as xpumd's default);
- ``both``: the two together.

Once every device is advertised, it measures idle CPU of every process over the same window and then
VmRSS / VmHWM. Then fault → Unhealthy at the kubelet stand-in, and recovery → Healthy:

- a kernel uevent: a card declares itself wedged (``WEDGED=rebind``), seen by ``kernel``; recovery is
  the rebind it asks for;
- an xpumd finding: uncorrectable memory errors on a card, seen by ``xpumd``; recovery is xpumd's
  re-attach after a reset;
- a polled kernel signal: a rising AER fatal count (no uevent announces it), seen by ``kernel`` at its
  next 5 s rescan; recovery is a rebind.

Run from the repository root: ``.venv/bin/python bench/bench_gpu_health.py`` (about a minute and a half).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from plugin_bench import (
    LoadAverage,
    advertised,
    header,
    idle_cpu_percent,
    peak_rss_mib,
    percentile,
    plugins_from_cli,
    rss_mib,
    wait_until,
)

from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.uevents import UeventBroadcaster
from intel_device_plugins.sim.xpumdcli import XpumdProcess, xpumd_process

ARRANGEMENTS = ("off", "kernel", "xpumd", "both")


def gpu_profile() -> str:
    """The default node's GPU sections only (other kinds would only add processes that are not measured)."""
    text = profile_text("default")
    sections = text.split("\n[")
    kept = [sections[0]] + [s for s in sections[1:] if s.startswith("[gpu]]") or s.startswith("node]")]
    return "\n[".join(kept)


def card_health(kubelet: KubeletStandIn, card: str) -> set[str]:
    return {
        device.health
        for devices in kubelet.resources().values()
        for device_id, device in devices.items()
        if device_id.rsplit("-", 1)[0] == card
    }


def healthy_count(kubelet: KubeletStandIn) -> int:
    return sum(
        1 for devices in kubelet.resources().values() for d in devices.values() if d.health == "Healthy"
    )


def address_of(tree: FakeTree, card: str) -> str:
    return tree.path(f"/sys/class/drm/{card}/device").resolve().name


async def fault_times(
    kubelet: KubeletStandIn,
    card: str,
    fault: Callable[[], object],
    recover: Callable[[], object],
    repeats: int,
    timeout: float,
) -> tuple[list[float], list[float]]:
    """Seconds from each fault to the card's IDs all Unhealthy at the kubelet, and from each recovery to
    all Healthy."""
    to_unhealthy, to_healthy = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fault()
        if asyncio.iscoroutine(result):
            await result
        await wait_until(lambda: card_health(kubelet, card) == {"Unhealthy"}, timeout)
        to_unhealthy.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = recover()
        if asyncio.iscoroutine(result):
            await result
        await wait_until(lambda: card_health(kubelet, card) == {"Healthy"}, timeout)
        to_healthy.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    return to_unhealthy, to_healthy


def rebind(tree: FakeTree, address: str) -> None:
    faults.bind(tree, address, faults.unbind(tree, address))


def row(name: str, samples: Sequence[float], recovered: Sequence[float]) -> str:
    def ms(values: Sequence[float], fraction: float) -> str:
        return f"{percentile(values, fraction) * 1000:.0f} ms"

    return (
        f"| {name} | {len(samples)} | {ms(samples, 0.5)} | {ms(samples, 0.95)} | {ms(recovered, 0.5)}"
        f" | {ms(recovered, 0.95)} |"
    )


async def run(workdir: Path, idle_seconds: float, repeats: int, aer_repeats: int, load: LoadAverage) -> str:
    tree = build_node(parse_node_spec(gpu_profile()), workdir / "node")
    uevents = workdir / "uevents"
    tree.uevents = UeventBroadcaster(uevents)
    socket = workdir / "xpumd.sock"
    common = ["-prefix", str(tree.root)]
    flags: dict[str, list[str]] = {
        "off": [],
        "kernel": ["-kernel-health"],
        "xpumd": ["-xpumd-endpoint", str(socket)],
        "both": ["-kernel-health", "-xpumd-endpoint", str(socket)],
    }
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(tree.uevents.close)
        xpumd: XpumdProcess = await stack.enter_async_context(
            xpumd_process(console_script("intel-sim-xpumd"), socket, tree.root, 5.0, workdir / "xpumd.log")
        )
        kubelets: dict[str, KubeletStandIn] = {}
        pids: dict[str, int] = {}
        for name in ARRANGEMENTS:
            plugin_dir = workdir / f"dp-{name}"
            kubelets[name] = await stack.enter_async_context(KubeletStandIn(plugin_dir))
            argv = [
                console_script("intel_gpu_device_plugin"),
                "-prefix", str(tree.root),
                "-device-plugin-dir", str(plugin_dir),
                "-cdi-dir", str(workdir / f"cdi-{name}"),
                "-uevent-dir", str(uevents),
                *flags[name],
            ]  # fmt: skip
            process = await stack.enter_async_context(plugin_process(argv, workdir / f"{name}.log"))
            pids[name] = process.process.pid
        expected = sum(advertised(plugins_from_cli("intel_device_plugins.plugins.gpu.cli", common)).values())
        try:
            await wait_until(lambda: all(healthy_count(k) == expected for k in kubelets.values()), timeout=60)
        except TimeoutError:
            counts = {name: healthy_count(kubelet) for name, kubelet in kubelets.items()}
            raise TimeoutError(f"not all {expected} devices Healthy everywhere: {counts}") from None
        await asyncio.sleep(6)  # past the first xpumd snapshot period and a 5 s rescan
        load.sample()
        idle = await idle_cpu_percent(pids, idle_seconds)
        load.sample()
        rss = {name: rss_mib(pid) for name, pid in pids.items()}
        hwm = {name: peak_rss_mib(pid) for name, pid in pids.items()}

        card = "card0"
        address = address_of(tree, card)
        faults.enable_aer(tree, address)
        await asyncio.sleep(6)  # the kernel plugins take the AER baseline at their next rescan
        wedged = await fault_times(
            kubelets["kernel"],
            card,
            lambda: faults.wedge(tree, 0, "rebind"),
            lambda: rebind(tree, address),
            repeats,
            timeout=10,
        )
        memory = await fault_times(
            kubelets["xpumd"],
            card,
            lambda: xpumd.send(f"memory_errors {address}"),
            lambda: xpumd.send(f"attach {address}"),
            repeats,
            timeout=10,
        )
        aer = await fault_times(
            kubelets["kernel"],
            card,
            lambda: faults.raise_aer(tree, address, "fatal", "Surprise Down Error"),
            lambda: rebind(tree, address),
            aer_repeats,
            timeout=15,
        )
        load.sample()

    lines = [
        f"{expected} GPU device IDs advertised by each process; idle window {idle_seconds:.0f} s.",
        "",
        "| process | flags | VmRSS | VmHWM | idle CPU |",
        "|---|---|---|---|---|",
    ]
    for name in ARRANGEMENTS:
        shown = " ".join(flags[name]).replace(str(socket), "<socket>") or "(none)"
        lines.append(
            f"| {name} | `{shown}` | {rss[name]:.1f} MiB | {hwm[name]:.1f} MiB"
            f" | {idle[name]:.3f} % of a core |"
        )
    lines += [
        "",
        "| fault → Unhealthy at the kubelet stand-in | n | p50 | p95 | recovery p50 | recovery p95 |",
        "|---|---|---|---|---|---|",
        row("kernel uevent: `WEDGED=rebind` (`-kernel-health`)", *wedged),
        row("xpumd finding: memory CRITICAL + `ras_uncorrectable_errors` (`-xpumd-endpoint`)", *memory),
        row("polled kernel signal: AER fatal count (`-kernel-health`, 5 s rescan)", *aer),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle CPU window (default 30)")
    parser.add_argument("--repeats", type=int, default=20, help="faults per event-driven source (default 20)")
    parser.add_argument(
        "--aer-repeats", type=int, default=4, help="AER faults, 5 s apart at most (default 4)"
    )
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    load = LoadAverage()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-gpu-health-") as workdir:
        table = asyncio.run(run(Path(workdir), args.idle_seconds, args.repeats, args.aer_repeats, load))
    load.sample()
    print(header(command, load, time.monotonic() - started))
    print()
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
