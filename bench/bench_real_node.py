"""Measure the real node of the test tier: kubelet build, node start/stop, first pod, memory.

Why a script: the figures in docs/node.md must be reproducible on CI's machine size (2 cores,
24 GiB), and they set what the real-node tier costs a CI run.

Usage (from the repository root, as root, after test/k8s/build.sh and test/node/build.sh):
    .venv/bin/python bench/bench_real_node.py build              # relink into an empty binary cache
    .venv/bin/python bench/bench_real_node.py start --runs 3
    .venv/bin/python bench/bench_real_node.py gpu --runs 10     # needs `make images`
    .venv/bin/python bench/bench_real_node.py operator --runs 10  # the operator as a pod; `make images`
    .venv/bin/python bench/bench_real_node.py cdi --runs 10       # pods with and without CDI; `make images`
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.binaries import find_binaries
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import KubeClient, wait_for
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
from k8stest.node.fixtures import NODE_PROFILE
from k8stest.node.plugins import PLUGIN_NAMESPACE, node_image_archive, registrations, sample_daemonset

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "test" / "node" / "build.sh"


def bench_build() -> dict[str, Any]:
    """build.sh into an empty binary cache (Go's build cache as it is), then a cache hit."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
        env["NODE_BIN_CACHE"] = tmp
        env["NODE_BUILD_NO_LINK"] = "1"
        t0 = time.monotonic()
        subprocess.run([str(BUILD)], env=env, check=True, capture_output=True, text=True)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        subprocess.run([str(BUILD)], env=env, check=True, capture_output=True, text=True)
        hit = time.monotonic() - t0
    return {
        "build_into_empty_bin_cache_s": round(first, 2),
        "cache_hit_s": round(hit, 3),
        "note": "Go build cache kept: with the control plane built, only kubelet-only packages compile",
    }


def _rss_kib(node: RealNode) -> int:
    """VmRSS of every process below the node's cgroup (kubelet, containerd, shims, containers)."""
    total = 0
    pids_root = Path("/sys/fs/cgroup/pids") / node.layout.cgroup.lstrip("/")
    for directory, _, _ in os.walk(pids_root):
        for pid in (Path(directory) / "cgroup.procs").read_text().split():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
    return total


def _first_pod_seconds(client: KubeClient, node: RealNode, name: str) -> float:
    t0 = time.monotonic()
    client.create("/api/v1/namespaces/default/pods", workload_pod(name, node.name, "true"))

    def succeeded() -> bool:
        pod = client.get(f"/api/v1/namespaces/default/pods/{name}")
        return bool(pod.get("status", {}).get("phase") == "Succeeded")

    wait_for(f"pod {name} Succeeded", succeeded, timeout=120)
    elapsed = time.monotonic() - t0
    client.delete(f"/api/v1/namespaces/default/pods/{name}")
    return elapsed


def bench_start(runs: int) -> dict[str, Any]:
    bins, reason = find_binaries()
    node_bins, node_reason = find_node_binaries()
    problem = reason or node_reason or node_unavailable_reason()
    if bins is None or node_bins is None or problem:
        raise SystemExit(problem)
    starts, pods, stops, rss = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
        work = Path(tmp)
        archive = write_test_images(node_bins, work / "images.tar")
        cp = start_node_control_plane(bins, work / "cp")
        client = cp.client()
        try:
            for run in range(runs):
                node = start_real_node(
                    node_bins,
                    cp,
                    work / f"node-{run}",
                    NodeConfig(name=f"bench-node-{run}"),
                    images=[archive],
                )
                try:
                    starts.append(node.started_in)
                    pods.append(_first_pod_seconds(client, node, f"bench-{run}"))
                    rss.append(_rss_kib(node))
                finally:
                    t0 = time.monotonic()
                    node.stop()
                    stops.append(time.monotonic() - t0)
                client.delete(f"/api/v1/nodes/{node.name}")
        finally:
            client.close()
            cp.stop()
    return {
        "runs": runs,
        "control_plane_start_s (reference, same run)": round(cp.started_in, 2),
        "node_start_to_ready_s": [round(s, 2) for s in starts],
        "node_start_median_s": round(statistics.median(starts), 2),
        "first_pod_created_to_succeeded_s": [round(s, 2) for s in pods],
        "node_stop_s": [round(s, 2) for s in stops],
        "node_rss_mib_after_first_pod": [round(r / 1024) for r in rss],
    }


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _more_than(count: Callable[[], int], before: int) -> Callable[[], bool]:
    return lambda: count() > before


@contextlib.contextmanager
def _profile_node(images: Sequence[Path] = ()) -> Iterator[tuple[Path, ControlPlane, KubeClient, RealNode]]:
    """A work directory, the node's own control plane and one node with :data:`NODE_PROFILE`'s
    devices and the busybox images (plus ``images``); all stopped and removed afterwards."""
    bins, reason = find_binaries()
    node_bins, node_reason = find_node_binaries()
    problem = reason or node_reason or node_unavailable_reason()
    if bins is None or node_bins is None or problem:
        raise SystemExit(problem)
    with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
        work = Path(tmp)
        build_node(parse_node_spec(NODE_PROFILE, "NODE_PROFILE"), work / "sim")
        busybox = write_test_images(node_bins, work / "images.tar")
        cp = start_node_control_plane(bins, work / "cp")
        client = cp.client()
        try:
            node = start_real_node(
                node_bins, cp, work / "node", NodeConfig(), sim_root=work / "sim", images=[busybox, *images]
            )
            try:
                yield work, cp, client, node
            finally:
                node.stop()
        finally:
            client.close()
            cp.stop()


def bench_gpu(runs: int, restarts: int = 5) -> dict[str, Any]:
    """GPU plugin DaemonSet (the operator's output for the sample, our node image already imported)
    created → allocatable on the node; then a one-GPU pod created → Succeeded. ``runs`` times on one
    node; between runs the DaemonSet is deleted and allocatable falls to 0. Then ``restarts``
    kubelet restarts with the plugin running: restart → the plugin's registration → allocatable;
    and as many hot-plugs and unplugs of a card: files written → allocatable follows."""
    i915, i915_cards = "gpu.intel.com/i915", 2  # k8stest.node.fixtures.NODE_PROFILE
    archive = node_image_archive()
    if archive is None:
        raise SystemExit("no node image archive: run `make images`")
    to_allocatable: list[float] = []
    to_pod: list[float] = []
    restart_total: list[float] = []
    restart_from_start: list[float] = []
    hotplug: list[float] = []
    unplug: list[float] = []
    with _profile_node([archive]) as (_, _, client, node):
        image = next(n for n in node.image_names() if "intel-device-plugins-node" in n)
        spec, ds = sample_daemonset(DeviceKind("gpu"), image)
        node_path = f"/api/v1/nodes/{node.name}"
        client.merge_patch(node_path, {"metadata": {"labels": dict(spec["nodeSelector"])}})
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
        )
        ds_path = f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets"
        expected = str(i915_cards * int(spec["sharedDevNum"]))

        def allocatable(value: str) -> bool:
            return bool(client.get(node_path)["status"]["allocatable"].get(i915, "0") == value)

        for run in range(runs):
            t0 = time.monotonic()
            client.create(ds_path, ds)
            wait_for(f"{i915}={expected}", lambda: allocatable(expected), timeout=120, interval=0.05)
            to_allocatable.append(time.monotonic() - t0)
            pod = workload_pod(f"gpu-{run}", node.name, "test -c /dev/dri/card*", limits={i915: "1"})
            t0 = time.monotonic()
            client.create("/api/v1/namespaces/default/pods", pod)

            def succeeded(name: str = f"gpu-{run}") -> bool:
                phase = client.get(f"/api/v1/namespaces/default/pods/{name}").get("status", {}).get("phase")
                if phase == "Failed":
                    raise SystemExit(f"pod {name} failed")
                return bool(phase == "Succeeded")

            wait_for("GPU pod Succeeded", succeeded, timeout=120, interval=0.05)
            to_pod.append(time.monotonic() - t0)
            client.delete(f"/api/v1/namespaces/default/pods/gpu-{run}")
            client.delete(f"{ds_path}/{ds['metadata']['name']}")
            wait_for(f"{i915}=0", lambda: allocatable("0"), timeout=120)

        client.create(ds_path, ds)
        wait_for(f"{i915}={expected}", lambda: allocatable(expected), timeout=120)

        def registered() -> int:
            return registrations(node, i915)

        for _ in range(restarts):
            before = registered()
            t0 = time.monotonic()
            node.restart_kubelet()
            t_started = time.monotonic()
            wait_for("re-registration", _more_than(registered, before), timeout=60, interval=0.05)
            wait_for(f"{i915}={expected}", lambda: allocatable(expected), timeout=60, interval=0.05)
            restart_total.append(time.monotonic() - t0)
            restart_from_start.append(time.monotonic() - t_started)

        tree = FakeTree(node.workdir)
        plugged = str((i915_cards + 1) * int(spec["sharedDevNum"]))
        for _ in range(restarts):
            t0 = time.monotonic()
            card = gpu.add_card(tree, driver="i915")
            node.realize_device_nodes()
            wait_for(f"{i915}={plugged}", lambda: allocatable(plugged), timeout=60, interval=0.05)
            hotplug.append(time.monotonic() - t0)
            t0 = time.monotonic()
            gpu.remove_card(tree, card.index)
            wait_for(f"{i915}={expected}", lambda: allocatable(expected), timeout=60, interval=0.05)
            unplug.append(time.monotonic() - t0)
    return {
        "runs": runs,
        "daemonset_created_to_allocatable_s": {
            "p50": round(statistics.median(to_allocatable), 2),
            "p95": round(_percentile(to_allocatable, 0.95), 2),
            "all": [round(v, 2) for v in to_allocatable],
        },
        "gpu_pod_created_to_succeeded_s": {
            "p50": round(statistics.median(to_pod), 2),
            "p95": round(_percentile(to_pod, 0.95), 2),
        },
        "reference": "first busybox pod created -> Succeeded without devices: see `start`",
        "kubelet_restart_to_allocatable_s": [round(v, 2) for v in restart_total],
        "new_kubelet_process_to_allocatable_s": [round(v, 2) for v in restart_from_start],
        "card_hot_plugged_to_allocatable_s": [round(v, 2) for v in hotplug],
        "card_unplugged_to_allocatable_s": [round(v, 2) for v in unplug],
    }


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "p50": round(statistics.median(values), 2),
        "p95": round(_percentile(values, 0.95), 2),
        "all": [round(v, 2) for v in values],
    }


def _running_seconds(client: KubeClient, pod: dict[str, Any]) -> float:
    """Pod created → phase Running (its container started); the pod is deleted afterwards."""
    name = pod["metadata"]["name"]
    path = f"/api/v1/namespaces/default/pods/{name}"
    t0 = time.monotonic()
    client.create("/api/v1/namespaces/default/pods", pod)

    def running() -> bool:
        phase = client.get(path).get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise SystemExit(f"pod {name} ended ({phase}) before it was seen Running")
        return bool(phase == "Running")

    wait_for(f"pod {name} Running", running, timeout=120, interval=0.05)
    elapsed = time.monotonic() - t0
    client.delete(path)
    return elapsed


def bench_operator(runs: int, rolls: int = 3) -> dict[str, Any]:
    """The operator installed from deploy/ as a pod on the real node, with both images present.

    ``runs`` times: GpuDevicePlugin sample applied → allocatable ``gpu.intel.com/i915`` on the node;
    a pod requesting one GPU → Running, against a pod without devices in the same run; sample deleted
    → allocatable 0 and the plugin pod gone. Baseline in the same run: the same DaemonSet created
    directly (no operator). Then ``rolls`` image tag changes of the applied sample: patch → new plugin
    pod Ready with allocatable back, and how long allocatable was below its count.
    """
    from k8stest.node.operator import install_operator, roll_plugin_image

    i915, i915_cards = "gpu.intel.com/i915", 2  # k8stest.node.fixtures.NODE_PROFILE
    to_allocatable: list[float] = []
    direct_to_allocatable: list[float] = []
    gpu_pod_running: list[float] = []
    plain_pod_running: list[float] = []
    deleted_to_zero: list[float] = []
    deleted_to_no_pods: list[float] = []
    roll_total: list[float] = []
    roll_gap: list[float] = []
    with _profile_node() as (work, cp, client, node):
        operator = install_operator(cp, node, work / "operator")
        sample = operator.samples["gpu"]
        crs = "/apis/deviceplugin.intel.com/v1/gpudeviceplugins"
        cr_path = f"{crs}/{sample['metadata']['name']}"
        node_path = f"/api/v1/nodes/{node.name}"
        client.merge_patch(node_path, {"metadata": {"labels": dict(sample["spec"]["nodeSelector"])}})
        expected = str(i915_cards * int(sample["spec"]["sharedDevNum"]))
        plugin_pods = f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods?labelSelector=app%3Dintel-gpu-plugin"

        def allocatable() -> str:
            return str(client.get(node_path)["status"]["allocatable"].get(i915, "0"))

        def live_plugin_pods() -> list[dict[str, Any]]:
            return [p for p in client.get(plugin_pods)["items"] if not p["metadata"].get("deletionTimestamp")]

        def withdrawn() -> bool:
            status = client.get(node_path)["status"]
            return bool(
                status["capacity"].get(i915, "0") == "0" and status["allocatable"].get(i915, "0") == "0"
            )

        def gone() -> bool:
            return allocatable() == "0" and not client.get(plugin_pods)["items"]

        for run in range(runs):
            t0 = time.monotonic()
            client.create(crs, sample)
            wait_for(f"{i915}={expected}", lambda: allocatable() == expected, timeout=120, interval=0.05)
            to_allocatable.append(time.monotonic() - t0)
            gpu_pod_running.append(
                _running_seconds(
                    client, workload_pod(f"gpu-{run}", node.name, "sleep 3600", limits={i915: "1"})
                )
            )
            plain_pod_running.append(
                _running_seconds(client, workload_pod(f"plain-{run}", node.name, "sleep 3600"))
            )
            t0 = time.monotonic()
            client.delete(cr_path)
            wait_for(f"capacity and allocatable {i915}=0", withdrawn, timeout=120, interval=0.05)
            deleted_to_zero.append(time.monotonic() - t0)
            wait_for("no plugin pod", gone, timeout=120, interval=0.05)
            deleted_to_no_pods.append(time.monotonic() - t0)

        image = str(sample["spec"]["image"])
        _, ds = sample_daemonset(DeviceKind("gpu"), image)
        ds_path = f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets"
        for _ in range(min(runs, 3)):
            t0 = time.monotonic()
            client.create(ds_path, ds)
            wait_for(f"{i915}={expected}", lambda: allocatable() == expected, timeout=120, interval=0.05)
            direct_to_allocatable.append(time.monotonic() - t0)
            client.delete(f"{ds_path}/{ds['metadata']['name']}")
            wait_for(f"{i915}=0 and no plugin pod", gone, timeout=120, interval=0.05)

        client.create(crs, sample)
        wait_for(f"{i915}={expected}", lambda: allocatable() == expected, timeout=120, interval=0.05)
        repository = image.rsplit(":", 1)[0]
        for roll in range(rolls):
            result = roll_plugin_image(
                client, node, cr_path, plugin_pods, i915, f"{repository}:0.1.{roll + 1}"
            )
            roll_total.append(result.seconds)
            roll_gap.append(result.below_count)
    return {
        "runs": runs,
        "operator_install_applied_to_ready_and_webhooks_answering_s": round(operator.ready_in, 2),
        "gpu_sample_applied_to_allocatable_s": _summary(to_allocatable),
        "baseline_daemonset_created_to_allocatable_s (no operator, same run)": _summary(
            direct_to_allocatable
        ),
        "gpu_pod_created_to_running_s": _summary(gpu_pod_running),
        "baseline_pod_without_devices_created_to_running_s (same run)": _summary(plain_pod_running),
        "sample_deleted_to_capacity_and_allocatable_0_s": _summary(deleted_to_zero),
        "sample_deleted_to_plugin_pod_gone_s": _summary(deleted_to_no_pods),
        "image_tag_change_to_new_pod_with_allocatable_back_s": _summary(roll_total),
        "image_tag_change_time_allocatable_below_count_s": _summary(roll_gap),
    }


def bench_cdi(runs: int) -> dict[str, Any]:
    """Pod created → Running on one node with the GPU sample's DaemonSet, three kinds of pod in turn,
    ``runs`` each: one i915 (the plugin answers device specs and a CDI name, which containerd
    resolves from the spec file), the monitoring resource (device specs only, no CDI name), and no
    device at all. Interleaved, so load from other jobs hits all three alike."""
    i915, monitoring = "gpu.intel.com/i915", "gpu.intel.com/monitoring"
    archive = node_image_archive()
    if archive is None:
        raise SystemExit("no node image archive: run `make images`")
    kinds: dict[str, dict[str, str] | None] = {
        "i915_with_cdi": {i915: "1"},
        "monitoring_no_cdi": {monitoring: "1"},
    }
    kinds["no_device"] = None
    times: dict[str, list[float]] = {name: [] for name in kinds}
    with _profile_node([archive]) as (_, _, client, node):
        image = next(n for n in node.image_names() if "intel-device-plugins-node" in n)
        spec, ds = sample_daemonset(DeviceKind("gpu"), image)
        node_path = f"/api/v1/nodes/{node.name}"
        client.merge_patch(node_path, {"metadata": {"labels": dict(spec["nodeSelector"])}})
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
        )
        client.create(f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets", ds)

        def advertised() -> bool:
            allocatable = client.get(node_path)["status"]["allocatable"]
            return bool(allocatable.get(i915, "0") != "0" and allocatable.get(monitoring, "0") != "0")

        wait_for(f"{i915} and {monitoring} allocatable", advertised, timeout=120)
        for run in range(runs):
            for name, limits in kinds.items():
                pod = workload_pod(f"{name.replace('_', '-')}-{run}", node.name, "sleep 30", limits=limits)
                pod["spec"]["terminationGracePeriodSeconds"] = 0
                times[name].append(_running_seconds(client, pod))
    return {"runs": runs, **{f"{name}_created_to_running_s": _summary(v) for name, v in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build")
    start = sub.add_parser("start")
    start.add_argument("--runs", type=int, default=3)
    gpu = sub.add_parser("gpu")
    gpu.add_argument("--runs", type=int, default=10)
    operator = sub.add_parser("operator")
    operator.add_argument("--runs", type=int, default=10)
    operator.add_argument("--rolls", type=int, default=3)
    cdi = sub.add_parser("cdi")
    cdi.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        result = bench_build()
    elif args.cmd == "start":
        result = bench_start(args.runs)
    elif args.cmd == "gpu":
        result = bench_gpu(args.runs)
    elif args.cmd == "cdi":
        result = bench_cdi(args.runs)
    else:
        result = bench_operator(args.runs, args.rolls)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
