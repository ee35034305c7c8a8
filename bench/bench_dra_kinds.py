"""DRA drivers of every kind: start → slices published, and one process per kind against one for all.

A private control plane (the pinned kube-apiserver, KCM, scheduler, kwok) with two kwok nodes, and the
simulator's ``default`` node, which has devices of all eight kinds (GPU, QAT, DSA, IAA, DLB, NPU, SGX,
FPGA). The devices each driver should publish come from its own profile scanning that node in this
process.

- **Start**, ``--runs`` rounds (kinds in a rotating order): each ``intel_<kind>_dra_driver`` alone, then
  ``intel_dra_drivers`` with every kind, from process spawn until every driver's ResourceSlices hold
  exactly its devices (polled every 10 ms); then SIGTERM, and the next one once it has withdrawn.
- **Footprint**: the eight single-kind processes (on one node) and the one combined process (on the
  other) run side by side, so load from elsewhere hits both alike. Once all are published and a
  settling pause has passed: CPU over ``--idle-seconds`` of idle (every thread's run time from
  schedstat), then resident memory (VmRSS, and PSS, which splits pages shared between processes).

Prints Markdown. Run from the repository root::

    .venv/bin/python bench/bench_dra_kinds.py --runs 3 --idle-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from plugin_bench import LoadAverage, header, idle_cpu_percent, pss_mib, rss_mib

from intel_device_plugins.plugins import dracombined
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from intel_device_plugins.sim.profiles import profile_text
from k8stest.binaries import find_binaries
from k8stest.controlplane import ControlPlane, running_control_plane
from k8stest.kubeclient import KubeClient
from k8stest.kwok import create_kwok_nodes
from k8stest.process import ManagedProcess

KINDS = ("gpu", "qat", "dsa", "iaa", "dlb", "npu", "sgx", "fpga")
POLL_SECONDS = 0.01
START_TIMEOUT = 60.0


def published(client: KubeClient, node: str) -> dict[str, set[str]]:
    """Driver name → the device names of its slices on ``node``."""
    found = client.get(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node}")
    result: dict[str, set[str]] = {}
    for item in found.get("items", []):
        result.setdefault(item["spec"]["driver"], set()).update(
            device["name"] for device in item["spec"].get("devices") or []
        )
    return result


def expected_devices(root: Path) -> dict[str, dict[str, set[str]]]:
    """Kind → {driver name: device names}, from each kind's profile scanning the simulated node."""
    parser = dracombined.build_parser()
    result = {}
    for kind in KINDS:
        (profile,) = dracombined.build_profiles(
            parser.parse_args(["-node-name=n", f"-prefix={root}", "--driver", kind]), parser
        )
        names = {device.name for device in profile.scan().devices}
        if not names:
            raise SystemExit(f"{kind}: the simulated node has no devices for {profile.driver_name}")
        result[kind] = {profile.driver_name: names}
    return result


class Drivers:
    """Starts driver processes against the control plane, each with a kubelet directory of its own."""

    def __init__(self, cp: ControlPlane, root: Path, workdir: Path) -> None:
        self.cp = cp
        self.root = root
        self.workdir = workdir
        self.env = {key: value for key, value in os.environ.items() if key not in ("NODE_NAME", "POD_UID")}
        self.started = 0

    def start(self, node: str, command: str, drivers: Sequence[str] = ()) -> ManagedProcess:
        self.started += 1
        # Socket paths must stay within 107 bytes.
        kubelet = Path(tempfile.mkdtemp(prefix="dra-bench-", dir="/tmp"))
        argv = [
            console_script(command),
            "-node-name", node,
            "-prefix", str(self.root),
            "-kubeconfig", str(self.cp.admin_kubeconfig),
            "-cdi-root", str(kubelet / "cdi"),
            "-kubelet-registrar-directory-path", str(kubelet / "plugins_registry"),
            "-kubelet-plugins-directory-path", str(kubelet / "plugins"),
            *(word for kind in drivers for word in ("--driver", kind)),
        ]  # fmt: skip
        log = self.workdir / f"{self.started:03d}-{command}.log"
        return ManagedProcess(command, argv, log, env=self.env)


def wait_published(
    client: KubeClient, node: str, want: Mapping[str, set[str]], processes: Sequence[ManagedProcess]
) -> float:
    """Seconds until the node's slices hold exactly ``want``; raises with a log tail if a driver died."""
    started = time.monotonic()
    while True:
        if published(client, node) == want:
            return time.monotonic() - started
        for process in processes:
            process.check_alive()
        if time.monotonic() - started > START_TIMEOUT:
            raise SystemExit(f"not published after {START_TIMEOUT:.0f} s: {published(client, node)}")
        time.sleep(POLL_SECONDS)


def stop(client: KubeClient, node: str, process: ManagedProcess) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    code = process.popen.wait(30)
    if code != 0 or published(client, node):
        raise SystemExit(f"{process.name} exited with {code} or left slices:\n{process.log_tail()}")


def start_times(
    drivers: Drivers, client: KubeClient, node: str, expected: Mapping[str, dict[str, set[str]]], runs: int
) -> dict[str, list[float]]:
    everything = {driver: names for kind in KINDS for driver, names in expected[kind].items()}
    times: dict[str, list[float]] = {kind: [] for kind in (*KINDS, "all")}
    for run in range(runs):
        order = [*KINDS, "all"]
        order = order[run % len(order) :] + order[: run % len(order)]
        for what in order:
            if what == "all":
                process = drivers.start(node, "intel_dra_drivers", KINDS)
                want = everything
            else:
                process = drivers.start(node, f"intel_{what}_dra_driver")
                want = expected[what]
            try:
                # From spawn: ManagedProcess returns as soon as the child exists.
                spawned = time.monotonic()
                wait_published(client, node, want, [process])
                times[what].append(time.monotonic() - spawned)
                stop(client, node, process)
            finally:
                process.stop()
    return times


def footprint(
    drivers: Drivers,
    client: KubeClient,
    nodes: tuple[str, str],
    expected: Mapping[str, dict[str, set[str]]],
    idle_seconds: float,
    load: LoadAverage,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(idle CPU %, VmRSS MiB, PSS MiB) per process: every kind alone and ``all`` together."""
    separate_node, combined_node = nodes
    everything = {driver: names for kind in KINDS for driver, names in expected[kind].items()}
    separate = {kind: drivers.start(separate_node, f"intel_{kind}_dra_driver") for kind in KINDS}
    combined = drivers.start(combined_node, "intel_dra_drivers", KINDS)
    processes = [*separate.values(), combined]
    try:
        wait_published(client, separate_node, everything, processes)
        wait_published(client, combined_node, everything, processes)
        time.sleep(3.0)
        pids = {kind: process.pid for kind, process in separate.items()} | {"all": combined.pid}
        load.sample()
        idle = asyncio.run(idle_cpu_percent(pids, idle_seconds))
        load.sample()
        rss = {name: rss_mib(pid) for name, pid in pids.items()}
        pss = {name: pss_mib(pid) for name, pid in pids.items()}
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        codes = {process.name: process.popen.wait(30) for process in processes}
        left = published(client, separate_node) | published(client, combined_node)
        if any(codes.values()) or left:
            raise SystemExit(f"exit codes {codes}; slices left: {sorted(left)}")
    finally:
        for process in processes:
            process.stop()
    return idle, rss, pss


def report(
    times: Mapping[str, list[float]],
    idle: Mapping[str, float],
    rss: Mapping[str, float],
    pss: Mapping[str, float],
    expected: Mapping[str, dict[str, set[str]]],
    idle_seconds: float,
) -> str:
    def cpu_per_minute(percent: float) -> str:
        return f"{percent * 0.6:.3f} s"

    def spread(values: Sequence[float]) -> str:
        ms = [value * 1000 for value in values]
        return f"{statistics.median(ms):.0f} ms ({min(ms):.0f} to {max(ms):.0f})"

    lines = [
        "| driver | devices | start → published, p50 (min to max) | idle CPU per minute | VmRSS | PSS |",
        "|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        ((driver, names),) = expected[kind].items()
        values = times[kind]
        lines.append(
            f"| `intel_{kind}_dra_driver` ({driver}) | {len(names)} | {spread(values)}"
            f" | {cpu_per_minute(idle[kind])}"
            f" | {rss[kind]:.1f} MiB | {pss[kind]:.1f} MiB |"
        )
    total = sum(len(names) for kind in KINDS for names in expected[kind].values())
    values = times["all"]
    lines.append(
        f"| **one process per kind, sum** | {total} | — | {cpu_per_minute(sum(idle[k] for k in KINDS))}"
        f" | {sum(rss[k] for k in KINDS):.1f} MiB | {sum(pss[k] for k in KINDS):.1f} MiB |"
    )
    lines.append(
        f"| **`intel_dra_drivers`, all {len(KINDS)} kinds** | {total} | {spread(values)}"
        f" | {cpu_per_minute(idle['all'])}"
        f" | {rss['all']:.1f} MiB | {pss['all']:.1f} MiB |"
    )
    separate_rss = sum(rss[k] for k in KINDS)
    lines.append("")
    lines.append(
        f"One process for all kinds: {rss['all']:.1f} MiB resident against {separate_rss:.1f} MiB for eight"
        f" ({rss['all'] / separate_rss:.2f}x), idle CPU {cpu_per_minute(idle['all'])} against"
        f" {cpu_per_minute(sum(idle[k] for k in KINDS))} a minute (measured over {idle_seconds:.0f} s)."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="start rounds per driver (default 3)")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle CPU window (default 60)")
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    bins, reason = find_binaries()
    if bins is None:
        raise SystemExit(reason)
    began = time.monotonic()
    load = LoadAverage()
    with (
        tempfile.TemporaryDirectory(prefix="bench-dra-kinds-") as tmp,
        running_control_plane(bins, Path(tmp)) as cp,
    ):
        workdir = Path(tmp)
        root = workdir / "node"
        build_node(parse_node_spec(profile_text("default")), root)
        expected = expected_devices(root)
        client = cp.client()
        try:
            first, second = create_kwok_nodes(client, 2, prefix="bench-dra-kinds-")
            drivers = Drivers(cp, root, workdir)
            times = start_times(drivers, client, first, expected, args.runs)
            load.sample()
            idle, rss, pss = footprint(drivers, client, (first, second), expected, args.idle_seconds, load)
        finally:
            client.close()
    print(header(command, load, time.monotonic() - began))
    print()
    print(report(times, idle, rss, pss, expected, args.idle_seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
