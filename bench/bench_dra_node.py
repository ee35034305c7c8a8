"""The GPU DRA driver next to the GPU device plugin on one real node, in the same run.

Why both at once: the figures compare two ways of getting a GPU into a pod, and the shared 2-core
machine's load changes from minute to minute; measured side by side, turn by turn, both see the
same load. One node (``k8stest.node.dra.DRA_NODE_PROFILE``: five simulated GPUs) runs the
GpuDevicePlugin sample's DaemonSet (the operator's builder) and the DRA driver from
``deploy/dra/gpu`` together; they serve the same cards, through different paths:

- ``claim``: a pod with a claim from a ResourceClaimTemplate (class ``gpu.intel.com``): KCM makes
  the claim, the scheduler allocates a card from the driver's slices, the kubelet calls the
  driver's NodePrepareResources, containerd reads the driver's per-claim CDI spec.
- ``device_plugin``: a pod with ``gpu.intel.com/i915: 1`` in its limits: the scheduler counts the
  plugin's extended resource, the kubelet calls Allocate, containerd reads the plugin's CDI spec.
- ``no_device``: the same pod without any device, the floor.

Each is created → Running, ``--runs`` times, interleaved. Then both processes idle for
``--idle-seconds``: CPU time over that window and resident memory of each.

Usage (root, after `make k8s-bins node-bins images`):
    .venv/bin/python bench/bench_dra_node.py --runs 20 --idle-seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from plugin_bench import LoadAverage, peak_rss_mib, rss_mib, run_seconds

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.binaries import find_binaries
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node import (
    NodeConfig,
    RealNode,
    find_node_binaries,
    node_unavailable_reason,
    start_node_control_plane,
    start_real_node,
    workload_pod,
    write_test_images,
)
from k8stest.node.dra import (
    DRA_NODE_CARDS,
    DRA_NODE_DEVICES,
    DRA_NODE_NAME,
    DRA_NODE_PROFILE,
    claim_template,
    pod_claim_names,
    with_claims,
)
from k8stest.node.dradriver import install_dra_driver
from k8stest.node.plugins import PLUGIN_NAMESPACE, node_image_archive, sample_daemonset

PODS = "/api/v1/namespaces/default/pods"
I915 = "gpu.intel.com/i915"
TEMPLATE = "bench-any-gpu"
# The console scripts as they appear in the node's process list.
PROCESSES = {"dra_driver": "intel_gpu_dra_driver", "device_plugin": "intel_gpu_device_plugin"}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "p50": round(statistics.median(values), 2),
        "p95": round(_percentile(values, 0.95), 2),
        "all": [round(v, 2) for v in values],
    }


def _wait_gone(client: KubeClient, path: str) -> None:
    def gone() -> bool:
        try:
            client.get(path)
        except ApiError as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(f"{path} deleted", gone, timeout=120)


def _running_seconds(client: KubeClient, pod: JSON) -> float:
    """Pod created → phase Running; then the pod (and a claim generated for it) is deleted and
    waited for outside the timing, so claims do not pile up on the cards."""
    name = pod["metadata"]["name"]
    path = f"{PODS}/{name}"
    t0 = time.monotonic()
    client.create(PODS, pod)

    def running() -> bool:
        phase = client.get(path).get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise SystemExit(f"pod {name} ended ({phase}) before it was seen Running")
        return bool(phase == "Running")

    wait_for(f"pod {name} Running", running, timeout=120, interval=0.05)
    elapsed = time.monotonic() - t0
    claims = pod_claim_names(client.get(path)).values()
    client.delete(path)
    _wait_gone(client, path)
    for claim in claims:
        claim_path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{claim}"
        _wait_gone(client, claim_path)
    return elapsed


def _node_pids(node: RealNode) -> dict[str, int]:
    """The pid of each of :data:`PROCESSES` among the node's processes (its pids cgroup subtree)."""
    found: dict[str, int] = {}
    root = Path("/sys/fs/cgroup/pids") / node.layout.cgroup.lstrip("/")
    for directory, _, _ in os.walk(root):
        for pid in (Path(directory) / "cgroup.procs").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            for key, script in PROCESSES.items():
                if any(part.decode(errors="replace").endswith(script) for part in argv[:2]):
                    found[key] = int(pid)
    missing = sorted(set(PROCESSES) - set(found))
    if missing:
        raise SystemExit(f"no {', '.join(PROCESSES[m] for m in missing)} process in node {node.name}")
    return found


@contextmanager
def _dra_node(work: Path) -> Iterator[tuple[Any, KubeClient, RealNode]]:
    bins, reason = find_binaries()
    node_bins, node_reason = find_node_binaries()
    problem = reason or node_reason or node_unavailable_reason()
    if bins is None or node_bins is None or problem:
        raise SystemExit(problem)
    archive = node_image_archive()
    if archive is None:
        raise SystemExit("no node image archive: run `make images`")
    build_node(parse_node_spec(DRA_NODE_PROFILE, "DRA_NODE_PROFILE"), work / "sim")
    busybox = write_test_images(node_bins, work / "images.tar")
    cp = start_node_control_plane(bins, work / "cp")
    client = cp.client()
    try:
        node = start_real_node(
            node_bins,
            cp,
            work / "node",
            NodeConfig(name=DRA_NODE_NAME),
            sim_root=work / "sim",
            images=[busybox, archive],
        )
        try:
            yield cp, client, node
        finally:
            node.stop()
    finally:
        client.close()
        cp.stop()


def bench(runs: int, idle_seconds: float) -> dict[str, Any]:
    load = LoadAverage()
    times: dict[str, list[float]] = {"claim": [], "device_plugin": [], "no_device": []}
    with tempfile.TemporaryDirectory(prefix="dra-bench-") as tmp, _dra_node(Path(tmp)) as (cp, client, node):
        image = next(n for n in node.image_names() if "intel-device-plugins-node" in n)
        spec, ds = sample_daemonset(DeviceKind("gpu"), image)
        client.merge_patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": dict(spec["nodeSelector"])}})
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
        )
        t0 = time.monotonic()
        client.create(f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets", ds)
        i915_cards = sum(1 for c in DRA_NODE_CARDS if c != "card3")  # card3 is the xe card
        expected = str(i915_cards * int(spec["sharedDevNum"]))
        wait_for(
            f"{I915}={expected}",
            lambda: client.get(f"/api/v1/nodes/{node.name}")["status"]["allocatable"].get(I915) == expected,
            timeout=120,
            interval=0.05,
        )
        plugin_ready = time.monotonic() - t0
        t0 = time.monotonic()
        driver = install_dra_driver(cp, node, "gpu", Path(tmp) / "install")
        driver.wait_published(client, set(DRA_NODE_DEVICES))
        driver_ready = time.monotonic() - t0
        template = {
            **claim_template(TEMPLATE, driver.driver),
            "metadata": {"name": TEMPLATE, "namespace": "default"},
        }
        client.create("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates", template)
        load.sample()
        for run in range(runs):
            pods = {
                "claim": with_claims(
                    workload_pod(f"claim-{run}", node.name, "sleep 3600"), {"gpu": TEMPLATE}
                ),
                "device_plugin": workload_pod(f"plugin-{run}", node.name, "sleep 3600", limits={I915: "1"}),
                "no_device": workload_pod(f"plain-{run}", node.name, "sleep 3600"),
            }
            for key, pod in pods.items():
                pod["spec"]["terminationGracePeriodSeconds"] = 0
                times[key].append(_running_seconds(client, pod))
        load.sample()
        pids = _node_pids(node)
        before = {key: run_seconds(pid) for key, pid in pids.items()}
        started = time.monotonic()
        time.sleep(idle_seconds)
        elapsed = time.monotonic() - started
        idle = {
            key: {
                "cpu_percent_of_one_core": round((run_seconds(pid) - before[key]) / elapsed * 100, 3),
                "rss_mib": round(rss_mib(pid), 1),
                "peak_rss_mib": round(peak_rss_mib(pid), 1),
            }
            for key, pid in pids.items()
        }
        load.sample()
    return {
        "runs": runs,
        "load_average_1min": load.text(),
        "device_plugin_daemonset_created_to_allocatable_s": round(plugin_ready, 2),
        "dra_driver_applied_to_all_cards_published_s": round(driver_ready, 2),
        **{f"{key}_pod_created_to_running_s": _summary(values) for key, values in times.items()},
        f"idle_{idle_seconds:.0f}s": idle,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="pods of each kind (default 20)")
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="idle window (default 60)")
    args = ap.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    result = bench(args.runs, args.idle_seconds)
    print(json.dumps({"command": command, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
