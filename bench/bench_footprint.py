"""Node footprint: four single-kind plugin processes against one combined process.

On the simulated ``mixed`` node (GPU, QAT, DSA, SGX), runs side by side, each arrangement with its
own kubelet stand-in and device plugin directory:

- the four upstream-style processes ``intel_gpu_device_plugin``, ``intel_qat_device_plugin``,
  ``intel_dsa_device_plugin`` and ``intel_sgx_device_plugin``;
- one ``intel_device_plugins --plugin gpu --plugin qat --plugin dsa --plugin sgx`` process.

Once every resource of both is advertised in full, it measures idle CPU of every process over the
same window (default flags) and then the resident memory: the sum of ``VmRSS`` and of
``VmHWM`` per arrangement. Both arrangements run at once so that load from elsewhere on the shared
machine hits them alike.

Run from the repository root: ``.venv/bin/python bench/bench_footprint.py`` (about half a minute).
``--profile default --kinds gpu,qat,dsa,iaa,dlb,npu,sgx`` compares seven processes with one on the
simulator's default node, which has devices of all seven kinds.
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
from collections.abc import Sequence
from pathlib import Path

from plugin_bench import (
    LoadAverage,
    advertised,
    all_advertised,
    header,
    idle_cpu_percent,
    peak_rss_mib,
    plugins_from_cli,
    pss_mib,
    rss_mib,
    wait_until,
)

from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text

KINDS = ("gpu", "qat", "dsa", "sgx")


def common_flags(root: Path, plugin_dir: Path, cdi_dir: Path) -> list[str]:
    return ["-prefix", str(root), "-device-plugin-dir", str(plugin_dir), "-cdi-dir", str(cdi_dir)]


async def run(
    workdir: Path,
    idle_seconds: float,
    load: LoadAverage,
    profile: str = "mixed",
    kinds: Sequence[str] = KINDS,
) -> str:
    compared = tuple(kinds)
    root = workdir / "node"
    build_node(parse_node_spec(profile_text(profile)), root)
    separate_dir, combined_dir = workdir / "dp-separate", workdir / "dp-combined"
    separate_flags = common_flags(root, separate_dir, workdir / "cdi-separate")
    combined_flags = common_flags(root, combined_dir, workdir / "cdi-combined")
    expected: dict[str, int] = {}
    for kind in compared:
        expected |= advertised(plugins_from_cli(f"intel_device_plugins.plugins.{kind}.cli", separate_flags))
    plugin_args = [word for kind in compared for word in ("--plugin", kind)]
    async with contextlib.AsyncExitStack() as stack:
        separate_kubelet = await stack.enter_async_context(KubeletStandIn(separate_dir))
        combined_kubelet = await stack.enter_async_context(KubeletStandIn(combined_dir))
        separate = {
            kind: await stack.enter_async_context(
                plugin_process(
                    [console_script(f"intel_{kind}_device_plugin"), *separate_flags], workdir / f"{kind}.log"
                )
            )
            for kind in compared
        }
        combined = await stack.enter_async_context(
            plugin_process(
                [console_script("intel_device_plugins"), *combined_flags, *plugin_args],
                workdir / "combined.log",
            )
        )
        await wait_until(
            lambda: all_advertised(separate_kubelet, expected) and all_advertised(combined_kubelet, expected),
            timeout=60,
        )
        await asyncio.sleep(2)
        pids = {kind: process.process.pid for kind, process in separate.items()}
        pids["combined"] = combined.process.pid
        load.sample()
        idle = await idle_cpu_percent(pids, idle_seconds)
        load.sample()
        rss = {name: rss_mib(pid) for name, pid in pids.items()}
        hwm = {name: peak_rss_mib(pid) for name, pid in pids.items()}
        pss = {name: pss_mib(pid) for name, pid in pids.items()}

    resources = ", ".join(f"{name} ({count})" for name, count in sorted(expected.items()))
    lines = [
        f"Resources advertised by both arrangements: {resources}.",
        "",
        "| process | VmRSS | VmHWM | PSS | idle CPU, default flags |",
        "|---|---|---|---|---|",
    ]
    for kind in compared:
        name = f"intel_{kind}_device_plugin"
        lines.append(
            f"| {name} | {rss[kind]:.1f} MiB | {hwm[kind]:.1f} MiB | {pss[kind]:.1f} MiB"
            f" | {idle[kind]:.3f} % of a core |"
        )
    total = [sum(figure[k] for k in compared) for figure in (rss, hwm, pss, idle)]
    one = [figure["combined"] for figure in (rss, hwm, pss, idle)]
    lines.append(
        f"| **{len(compared)} processes, total** | **{total[0]:.1f} MiB** | **{total[1]:.1f} MiB**"
        f" | **{total[2]:.1f} MiB** | **{total[3]:.2f} % of a core** |"
    )
    lines.append(
        f"| **intel_device_plugins, one process** | **{one[0]:.1f} MiB** | **{one[1]:.1f} MiB**"
        f" | **{one[2]:.1f} MiB** | **{one[3]:.2f} % of a core** |"
    )
    ratios = " | ".join(f"{o / t:.2f}x" if t else "—" for o, t in zip(one, total, strict=True))
    lines.append(f"| one process / {len(compared)} processes | {ratios} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU window (default 20)")
    parser.add_argument("--profile", default="mixed", help="simulated node profile (default mixed)")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated kinds to compare (default {','.join(KINDS)})",
    )
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    load = LoadAverage()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-footprint-") as workdir:
        table = asyncio.run(run(Path(workdir), args.idle_seconds, load, args.profile, args.kinds.split(",")))
    load.sample()
    print(header(command, load, time.monotonic() - started))
    print()
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
