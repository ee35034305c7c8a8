"""Measure the Kubernetes test harness: build time, control-plane start time, RSS at scale.

Why a script: the figures in docs/harness.md must be reproducible on CI's machine size
(2 cores, 24 GiB), and re-measured whenever the pinned Kubernetes release changes.

Usage (from the repository root, as root for the device-manager part):
    .venv/bin/python bench/bench_k8s_harness.py build --cold   # empty Go build cache: ~half an hour
    .venv/bin/python bench/bench_k8s_harness.py build          # warm: cache hit
    .venv/bin/python bench/bench_k8s_harness.py start --runs 3
    .venv/bin/python bench/bench_k8s_harness.py rss --nodes 100 1000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from k8stest.binaries import Binaries, find_binaries
from k8stest.controlplane import ControlPlane, start_control_plane
from k8stest.kwok import create_kwok_nodes, wait_daemonset_ready

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "test" / "k8s" / "build.sh"


def bench_build(cold: bool) -> dict[str, Any]:
    """Time build.sh. ``cold`` is a fresh machine: empty module cache, build cache and binary cache."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="k8s-bench-") as tmp:
        if cold:
            env["GOCACHE"] = str(Path(tmp) / "gocache")
            env["GOMODCACHE"] = str(Path(tmp) / "gomodcache")
            env["K8S_BIN_CACHE"] = str(Path(tmp) / "bin")
            env["K8S_BUILD_NO_LINK"] = "1"  # keep test/k8s/bin pointing at the real cache
        t0 = time.monotonic()
        try:
            out = subprocess.run([str(BUILD)], env=env, check=True, capture_output=True, text=True)
            elapsed = time.monotonic() - t0
        finally:
            if cold:  # module cache files are read-only; let go remove them
                subprocess.run(["go", "clean", "-modcache"], env=env, check=False)
    return {
        "kind": "cold" if cold else "warm",
        "seconds": round(elapsed, 2),
        "dir": out.stdout.strip().splitlines()[-1],
        "stderr_tail": out.stderr.strip().splitlines()[-3:],
        "note": "cold = empty GOMODCACHE, GOCACHE and binary cache (fresh machine); warm = cache hit",
    }


def _stack_rss_kib(cp: ControlPlane) -> dict[str, int]:
    """VmRSS of every process in each component's process group."""
    out: dict[str, int] = {}
    for proc in cp.processes:
        pgid = os.getpgid(proc.pid)
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getpgid(int(entry.name)) != pgid:
                    continue
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except (OSError, ValueError):
                continue
        out[proc.name] = total
    return out


def _bins() -> Binaries:
    bins, reason = find_binaries()
    if bins is None:
        sys.exit(reason)
    return bins


def bench_start(runs: int) -> dict[str, Any]:
    bins = _bins()
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="k8s-bench-") as tmp:
            cp = start_control_plane(bins, Path(tmp))
            times.append(cp.started_in)
            cp.stop()
    return {
        "kind": "control-plane start (to default ServiceAccount)",
        "runs": [round(t, 1) for t in times],
        "median_s": round(statistics.median(times), 1),
    }


def bench_rss(node_counts: list[int]) -> list[dict[str, Any]]:
    """Start one control plane; for each count, grow to that many kwok nodes plus a DaemonSet."""
    bins = _bins()
    results = []
    with tempfile.TemporaryDirectory(prefix="k8s-bench-") as tmp:
        cp = start_control_plane(bins, Path(tmp))
        client = cp.client()
        try:
            client.create(
                "/apis/apps/v1/namespaces/default/daemonsets",
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "metadata": {"name": "bench"},
                    "spec": {
                        "selector": {"matchLabels": {"app": "bench"}},
                        "template": {
                            "metadata": {"labels": {"app": "bench"}},
                            "spec": {
                                "nodeSelector": {"type": "kwok"},
                                "containers": [{"name": "c", "image": "bench"}],
                            },
                        },
                    },
                },
            )
            have = 0
            for count in sorted(node_counts):
                t0 = time.monotonic()
                create_kwok_nodes(client, count - have, prefix=f"bench-{have}-", timeout=900)
                nodes_s = time.monotonic() - t0
                have = count
                wait_daemonset_ready(client, "default", "bench", expected=count, timeout=900)
                ds_s = time.monotonic() - t0
                time.sleep(10)  # let heartbeats and controllers settle before sampling
                rss = _stack_rss_kib(cp)
                results.append(
                    {
                        "nodes": count,
                        "daemonset_pods_ready": count,
                        "seconds_to_nodes_ready": round(nodes_s, 1),
                        "seconds_to_daemonset_ready": round(ds_s, 1),
                        "rss_mib": {k: round(v / 1024) for k, v in rss.items()},
                        "rss_total_mib": round(sum(rss.values()) / 1024),
                    }
                )
        finally:
            client.close()
            cp.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--cold", action="store_true")
    s = sub.add_parser("start")
    s.add_argument("--runs", type=int, default=3)
    r = sub.add_parser("rss")
    r.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    args = ap.parse_args(argv)
    result: Any
    if args.cmd == "build":
        result = bench_build(args.cold)
    elif args.cmd == "start":
        result = bench_start(args.runs)
    else:
        result = bench_rss(args.nodes)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
