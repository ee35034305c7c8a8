"""End-to-end operator figures on the harness control plane (pinned kube-apiserver, KCM, scheduler, kwok).

Starts a private control plane, installs ``deploy/operator/self-signed`` and runs the operator as a local
process with the Deployment's flags and its ServiceAccount token (``k8stest.operatorinstall``), then:

- ``latency``: ``--crs`` GPU CRs created one after another (through the admission webhooks); for each, the
  time from sending the create (so admission included) to the DaemonSet existing (p50/p95/max). Back to
  back by default, so each CR's follow-up reconciles (status, DaemonSet events) overlap the next one;
  ``--pause`` spaces them out.
- ``admission``: dry-run creates of CRs of every kind, valid and invalid, at ``--rate`` per second for
  ``--seconds``, timed end to end through the API server (which calls the mutating and then the validating
  webhook over TLS for each valid request, and stops after the validating one for an invalid request).
- ``admission-baseline``: the same requests on objects the webhook configurations then exclude with an
  ``objectSelector``, so the API server's own share of the latency (authentication, schema, dry run) shows.
- ``samples``: the 8 sample CRs of ``deploy/operator/samples`` created; reports when every CR's status names
  its DaemonSet, and the operator's current RSS (VmRSS) then, after a settling pause.
- ``cycles``: ``--cycles`` rounds of creating the 8 sample CRs and deleting them again; for each round the
  time from the first create to all 8 DaemonSets existing, and the operator's CPU time (user + system) for
  the whole round (creates, statuses, deletes, until the DaemonSets are gone and 2 s of quiet); medians.
- ``webhook-cost``: ``--pairs`` dry-run creates of the same sample CR in turns, one through the webhooks and
  one that an ``objectSelector`` keeps from them, back to back: what the two webhook calls add to a create,
  with the noise of the machine hitting both sides alike. Also counts the TCP connections the API server
  opened to the webhook port meanwhile (each one a TLS handshake).
- ``status``: ``--nodes`` kwok nodes in 8 pools, one GPU CR per pool; reports when all 8 DaemonSets are Ready
  and how long after that every CR's status shows the right desired/ready counts and node names.

The operator's peak RSS (VmHWM) so far is printed after each step.

    .venv/bin/python bench/bench_operator_cluster.py latency admission admission-baseline status --nodes 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, API_VERSION, DeviceKind
from k8stest.binaries import find_binaries
from k8stest.controlplane import running_control_plane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.kwok import create_kwok_nodes
from k8stest.operatorinstall import NS, WEBHOOK_CONFIGS, install

GPU = DeviceKind.GPU
POOL_LABEL = "bench.intel.com/pool"


def cr_path(kind: DeviceKind, name: str = "") -> str:
    base = f"/apis/{API_VERSION}/{kind.plural}"
    return f"{base}/{name}" if name else base


def statuses_name_daemonsets(client: KubeClient, crs: list[dict[str, Any]]) -> bool:
    """Whether every CR's status names the DaemonSet the operator made for it."""
    for body in crs:
        kind = DeviceKind.from_kind(body["kind"])
        name = body["metadata"]["name"]
        st = client.get(cr_path(kind, name)).get("status") or {}
        if (st.get("controlledDaemonSet") or {}).get("name") != kind.daemonset_name(name):
            return False
    return True


def cr(kind: DeviceKind, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": {"name": name}, "spec": spec}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


SAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "operator" / "samples"


def samples(client: KubeClient, pid: int, settle_s: float = 5.0) -> dict[str, Any]:
    """Create upstream's 8 sample CRs and wait until every status names its DaemonSet."""
    import yaml

    crs = [yaml.safe_load(p.read_text()) for p in sorted(SAMPLES.glob("deviceplugin_v1_*.yaml"))]
    start = time.perf_counter()
    for body in crs:
        client.create(cr_path(DeviceKind.from_kind(body["kind"])), body)

    def reconciled() -> bool:
        return statuses_name_daemonsets(client, crs)

    wait_for("8 sample statuses", reconciled, timeout=120, interval=0.1)
    done_at = time.perf_counter() - start
    time.sleep(settle_s)
    result = {
        "CRs": len(crs),
        "statuses written after s": round(done_at, 2),
        "operator RSS MiB now": rss_mib(pid),
    }
    for body in crs:
        client.delete(cr_path(DeviceKind.from_kind(body["kind"]), body["metadata"]["name"]))
    return result


def cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycles(client: KubeClient, pid: int, rounds: int, quiet_s: float = 2.0) -> dict[str, Any]:
    """Create the 8 samples, wait for their DaemonSets and statuses, delete them, ``rounds`` times."""
    import yaml

    crs = [yaml.safe_load(p.read_text()) for p in sorted(SAMPLES.glob("deviceplugin_v1_*.yaml"))]
    wanted = {DeviceKind.from_kind(b["kind"]).daemonset_name(b["metadata"]["name"]) for b in crs}
    ds_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets"

    def daemonsets() -> set[str]:
        return {d["metadata"]["name"] for d in client.get(ds_path)["items"]} & wanted

    def statuses_written() -> bool:
        return statuses_name_daemonsets(client, crs)

    to_daemonsets, created, cpu = [], [], []
    for _ in range(rounds):
        cpu_before = cpu_s(pid)
        start = time.perf_counter()
        for body in crs:
            client.create(cr_path(DeviceKind.from_kind(body["kind"])), body)
        created.append(time.perf_counter() - start)
        wait_for("8 DaemonSets", lambda: daemonsets() == wanted, timeout=120, interval=0.01)
        to_daemonsets.append(time.perf_counter() - start)
        wait_for("8 sample statuses", statuses_written, timeout=120, interval=0.1)
        time.sleep(quiet_s)
        for body in crs:
            client.delete(cr_path(DeviceKind.from_kind(body["kind"]), body["metadata"]["name"]))
        wait_for("DaemonSets gone", lambda: not daemonsets(), timeout=120, interval=0.1)
        time.sleep(quiet_s)
        cpu.append(cpu_s(pid) - cpu_before)
    return {
        "rounds": rounds,
        "first create to 8 DaemonSets s (median)": round(statistics.median(to_daemonsets), 2),
        "first create to the 8th created s (median)": round(statistics.median(created), 2),
        "first create to 8 DaemonSets s (each)": [round(t, 2) for t in to_daemonsets],
        "operator CPU s per round (median)": round(statistics.median(cpu), 3),
        "operator CPU s per round (each)": [round(c, 3) for c in cpu],
        "operator RSS MiB now": rss_mib(pid),
    }


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def latency(client: KubeClient, count: int, pause: float = 0.0) -> dict[str, Any]:
    times = []
    creates = []
    for i in range(count):
        name = f"bench-lat-{i}"
        start = time.perf_counter()  # before the create call: admission is part of "applied"
        client.create(cr_path(GPU), cr(GPU, name, {"nodeSelector": {"bench.intel.com/none": "x"}}))
        creates.append((time.perf_counter() - start) * 1000)
        ds_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{GPU.daemonset_name(name)}"

        def exists(path: str = ds_path) -> bool:
            try:
                client.get(path)
                return True
            except ApiError as e:
                if e.status != 404:
                    raise
                return False

        while not exists():
            if time.perf_counter() - start > 30:
                raise TimeoutError(name)
            time.sleep(0.005)
        times.append((time.perf_counter() - start) * 1000)
        time.sleep(pause)
    for i in range(count):
        client.delete(cr_path(GPU, f"bench-lat-{i}"))
    return {
        "CR -> DaemonSet, CRs": count,
        "pause between CRs s": pause,
        "p50 ms": pct(times, 0.5),
        "p95 ms": pct(times, 0.95),
        "max ms": round(max(times), 1),
        "of which the create call, p50 ms": pct(creates, 0.5),
    }


NO_WEBHOOK_LABEL = "bench.intel.com/no-webhook"


def skip_webhooks_for_label(client: KubeClient) -> None:
    """Objects labelled ``NO_WEBHOOK_LABEL`` bypass the webhooks: a baseline of the API server alone."""
    selector = {"matchExpressions": [{"key": NO_WEBHOOK_LABEL, "operator": "DoesNotExist"}]}
    for resource, name in WEBHOOK_CONFIGS.items():
        path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}"
        hooks = client.get(path)["webhooks"]
        ops = [
            {"op": "add", "path": f"/webhooks/{i}/objectSelector", "value": selector}
            for i in range(len(hooks))
        ]
        client.request("PATCH", path, ops, content_type="application/json-patch+json")


def admission(client: KubeClient, rate: float, seconds: float, *, webhooks: bool = True) -> dict[str, Any]:
    total = int(rate * seconds)
    kinds = list(ALL_KINDS)
    latencies: list[float] = []
    denied = 0
    lock = threading.Lock()
    clients = [KubeClient(client.creds) for _ in range(4)]

    def one(i: int) -> None:
        nonlocal denied
        kind = kinds[i % len(kinds)]
        valid = i % 4 != 3
        image = node_image() if valid else "intel/other:devel"
        body = cr(kind, f"adm-{i}", {"image": image, "logLevel": 2, "nodeSelector": {"a": "b"}})
        if not webhooks:
            body["metadata"]["labels"] = {NO_WEBHOOK_LABEL: "true"}
        c = clients[i % len(clients)]
        t0 = time.perf_counter()
        try:
            c.create(cr_path(kind) + "?dryRun=All", body)
            ok = True
        except ApiError:
            ok = False
        took = (time.perf_counter() - t0) * 1000
        with lock:
            latencies.append(took)
            denied += 0 if ok else 1

    threads: list[threading.Thread] = []
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    return {
        "admission requests": total,
        "rate /s": rate,
        "through the webhooks": webhooks,
        "denied": f"{denied} (expected {total // 4 if webhooks else 0})",
        "p50 ms": pct(latencies, 0.5),
        "p95 ms": pct(latencies, 0.95),
        "p99 ms": pct(latencies, 0.99),
        "max ms": round(max(latencies), 1),
    }


def webhook_connections(port: int) -> set[int]:
    """Client ports of the TCP connections to the local ``port`` (``/proc/net/tcp`` and ``tcp6``)."""
    seen: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.rsplit(":", 1)[1], 16) == port:
                seen.add(int(remote.rsplit(":", 1)[1], 16))
    return seen


def webhook_cost(client: KubeClient, pairs: int, webhook_port: int) -> dict[str, Any]:
    """Dry-run creates of one sample CR in turns with and without the webhooks; per-create latencies."""
    import yaml

    skip_webhooks_for_label(client)
    sample = yaml.safe_load((SAMPLES / "deviceplugin_v1_gpudeviceplugin.yaml").read_text())
    path = cr_path(DeviceKind.from_kind(sample["kind"])) + "?dryRun=All"
    bare = {**sample, "metadata": {**sample["metadata"], "labels": {NO_WEBHOOK_LABEL: "true"}}}
    with_hooks: list[float] = []
    without: list[float] = []
    for body in (sample, bare) * 20:  # warm both paths (and the API server's connections) first
        client.create(path, body)
    ports = webhook_connections(webhook_port)
    for i in range(2 * pairs):
        body, into = (sample, with_hooks) if i % 2 == 0 else (bare, without)
        t0 = time.perf_counter()
        client.create(path, body)
        into.append((time.perf_counter() - t0) * 1000)
        ports |= webhook_connections(webhook_port)
    extra = [a - b for a, b in zip(with_hooks, without, strict=True)]
    return {
        "pairs": pairs,
        "create through the webhooks, p50 / p90 ms": f"{pct(with_hooks, 0.5)} / {pct(with_hooks, 0.9)}",
        "create the webhooks skip, p50 / p90 ms": f"{pct(without, 0.5)} / {pct(without, 0.9)}",
        "webhooks add, median of the pairs ms": round(statistics.median(extra), 2),
        "connections to the webhook port seen": len(ports),
    }


def status(client: KubeClient, nodes: int, pools: int = 8) -> dict[str, Any]:
    t0 = time.perf_counter()
    names: list[str] = []
    for p in range(pools):
        count = nodes // pools + (1 if p < nodes % pools else 0)
        names += create_kwok_nodes(
            client, count, prefix=f"bench-{p}-", labels={POOL_LABEL: str(p)}, timeout=600
        )
    nodes_ready = time.perf_counter() - t0
    expected = {p: nodes // pools + (1 if p < nodes % pools else 0) for p in range(pools)}
    start = time.perf_counter()
    for p in range(pools):
        client.create(cr_path(GPU), cr(GPU, f"bench-pool-{p}", {"nodeSelector": {POOL_LABEL: str(p)}}))

    def ds_ready() -> bool:
        for p in range(pools):
            try:
                ds = client.get(
                    f"/apis/apps/v1/namespaces/{NS}/daemonsets/{GPU.daemonset_name(f'bench-pool-{p}')}"
                )
            except ApiError:
                return False
            st = ds.get("status") or {}
            if not (st.get("desiredNumberScheduled") == st.get("numberReady") == expected[p]):
                return False
        return True

    def converged() -> bool:
        for p in range(pools):
            st = client.get(cr_path(GPU, f"bench-pool-{p}")).get("status") or {}
            if not (
                st.get("desiredNumberScheduled") == st.get("numberReady") == expected[p]
                and len(st.get("nodeNames") or ()) == expected[p]
            ):
                return False
        return True

    wait_for("8 DaemonSets Ready", ds_ready, timeout=900, interval=0.1)
    ds_at = time.perf_counter() - start
    wait_for("8 CR statuses correct", converged, timeout=300, interval=0.1)
    status_at = time.perf_counter() - start
    for p in range(pools):
        client.delete(cr_path(GPU, f"bench-pool-{p}"))
    return {
        "kwok nodes": len(names),
        "nodes Ready after s": round(nodes_ready, 1),
        "CRs": pools,
        "DaemonSets Ready after s": round(ds_at, 1),
        "statuses correct after s": round(status_at, 1),
        "status lag behind DaemonSets s": round(status_at - ds_at, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "what",
        nargs="+",
        choices=("latency", "admission", "admission-baseline", "samples", "cycles", "webhook-cost", "status"),
    )
    ap.add_argument("--crs", type=int, default=50)
    ap.add_argument(
        "--pause", type=float, default=0.0, help="seconds between CRs in latency (0: back to back)"
    )
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=6, help="rounds of the cycles step")
    ap.add_argument("--pairs", type=int, default=300, help="pairs of creates of the webhook-cost step")
    args = ap.parse_args()
    bins, reason = find_binaries()
    if bins is None:
        print(reason, file=sys.stderr)
        return 2
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    with (
        tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp,
        running_control_plane(bins, Path(tmp) / "cp") as cp,
    ):
        installed = install(cp, Path(tmp) / "operator")
        client = cp.client()
        try:
            for what in args.what:
                if what == "latency":
                    result = latency(client, args.crs, args.pause)
                elif what == "admission":
                    result = admission(client, args.rate, args.seconds)
                elif what == "admission-baseline":
                    skip_webhooks_for_label(client)
                    result = admission(client, args.rate, args.seconds, webhooks=False)
                elif what == "samples":
                    op = next(o for o in installed.operators if o.proc.alive())
                    result = samples(client, op.proc.pid)
                elif what == "cycles":
                    op = next(o for o in installed.operators if o.proc.alive())
                    result = cycles(client, op.proc.pid, args.cycles)
                elif what == "webhook-cost":
                    result = webhook_cost(client, args.pairs, installed.webhook_port)
                else:
                    result = status(client, args.nodes)
                print(f"== {what}")
                op = next(o for o in installed.operators if o.proc.alive())
                result["operator peak RSS MiB so far"] = peak_rss_mib(op.proc.pid)
                for k, v in result.items():
                    print(f"{k:>40}: {v}")
        finally:
            client.close()
            installed.stop()
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
