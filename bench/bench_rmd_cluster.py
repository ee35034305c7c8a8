"""RMD operator figures on the harness control plane (pinned kube-apiserver, KCM, scheduler, kwok).

Starts a private control plane, applies ``deploy/rmd/default`` and the TLS Secrets, creates ``--nodes`` kwok
nodes labelled for L3 CAT, serves one simulated RMD per node (HTTPS with client certificates, all in one
process) and runs ``intel-rmd-operator`` and ``intel-rmd-node-agent`` as local processes with their
ServiceAccount tokens and default periods. Then:

- ``enforce``: ``--workloads`` RmdWorkloads, one after another, each selecting every node by label; the time
  from sending the create to ``status.enforced`` reading ``N/N`` (p50/p95/max). Each is deleted (finalizer:
  removed from every RMD) before the next. Floor, same run: one POST to every RMD from one client,
  concurrently, as the operator does it (no API server involved).
- ``pod``: ``--pods`` pods with ``intel.com/l3_cache_ways: 2`` and an MBA annotation on the agent's node;
  time from the pod create to its RmdWorkload reading ``1/1`` (includes kwok marking the pod Running).
- ``footprint``: RSS (VmRSS, VmHWM) of the operator and the agent, and their CPU use over ``--idle`` seconds
  of idling with ``--nodes`` RMDs to poll; floor: a Python process that only imports the operator. The idle
  CPU is measured twice in the same run: first with the earlier periods (``--node-state-period 10
  --workload-resync 60``), then with the operator restarted on its defaults. Baseline, same windows: the
  device plugins operator (``deploy/operator/self-signed``, run the same way) with the GPU sample CR over the
  same nodes, idling beside it.

Each RMD is the simulator started as the operator's ``rmd`` DaemonSet runs RMD: its arguments, the shipped
``intel-rmd-config`` and the Secrets laid out as the pod would mount them (signature ACL, client certificate
in the admin directory).

    .venv/bin/python bench/bench_rmd_cluster.py --nodes 100 --workloads 20 --pods 10 --idle 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import yaml

from intel_device_plugins.rmd.client import RmdClient, TlsMaterial, Transport, client_ssl_context
from intel_device_plugins.rmd.model import RmdConfigSpec, parse
from intel_device_plugins.rmd.reconcile import (
    NFD_RDT_LABEL,
    RMD_CLIENT_SECRET,
    RMD_CONFIG_MAP,
    rmd_daemonset,
)
from intel_device_plugins.sim.rmd import VolumeSources, lay_out_container
from k8stest.binaries import find_binaries
from k8stest.controlplane import ControlPlane, running_control_plane
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.kubeletapi import podresources_v1_pb2 as pr_pb
from k8stest.kubeletapi import podresources_v1_pb2_grpc as pr_grpc
from k8stest.kwok import create_kwok_nodes
from k8stest.operatorinstall import install
from k8stest.process import ManagedProcess

ROOT = Path(__file__).resolve().parents[1]
NS = "intel-rmd"
API = "/apis/intel.com/v1alpha1"
EARLIER_PERIODS = ("--node-state-period", "10", "--workload-resync", "60")  # the defaults until 2026-11-25


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def proc_status(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        [str(cp.binaries.path("kubectl")), f"--kubeconfig={cp.admin_kubeconfig}", *args],
        input=stdin,
        text=True,
        check=True,
        capture_output=True,
    )


class Lister(pr_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.cpus: dict[tuple[str, str], list[int]] = {}

    def List(self, request: Any, context: Any) -> pr_pb.ListPodResourcesResponse:
        return pr_pb.ListPodResourcesResponse(
            pod_resources=[
                pr_pb.PodResources(
                    name=n, namespace=ns, containers=[pr_pb.ContainerResources(name="container1", cpu_ids=c)]
                )
                for (ns, n), c in self.cpus.items()
            ]
        )


def enforced(client: KubeClient, ns: str, name: str, want: str) -> Callable[[], bool]:
    def probe() -> bool:
        return bool(
            (client.get(f"{API}/namespaces/{ns}/rmdworkloads/{name}").get("status") or {}).get("enforced")
            == want
        )

    return probe


def enforce(client: KubeClient, cp: ControlPlane, nodes: int, count: int) -> dict[str, Any]:
    times = []
    for i in range(count):
        cpu = (i % 2) * 16 + (i // 2) % 16  # alternate the two caches: at most 6 guaranteed ways each
        body = {
            "apiVersion": "intel.com/v1alpha1",
            "kind": "RmdWorkload",
            "metadata": {"name": f"bench-{i}", "namespace": "default"},
            "spec": {
                "coreIds": [str(cpu)],
                "rdt": {"cache": {"max": 1, "min": 1}},
                "nodeSelector": {NFD_RDT_LABEL: "true"},
            },
        }
        start = time.perf_counter()
        client.create(f"{API}/namespaces/default/rmdworkloads", body)
        wait_for(
            f"bench-{i} enforced",
            enforced(client, "default", f"bench-{i}", f"{nodes}/{nodes}"),
            timeout=120,
            interval=0.02,
        )
        times.append((time.perf_counter() - start) * 1000)
        kubectl(cp, "delete", "rmdworkload", f"bench-{i}", "-n", "default", "--timeout=120s")
    return {
        "enforce_ms_p50": pct(times, 0.5),
        "enforce_ms_p95": pct(times, 0.95),
        "enforce_ms_max": round(max(times), 1),
    }


async def floor(urls: list[str], transport_dir: Path) -> dict[str, Any]:
    transport = Transport(client_ssl_context(TlsMaterial.from_dir(transport_dir)))
    times = []
    async with aiohttp.ClientSession() as session:
        clients = [RmdClient(session, transport, u) for u in urls]
        for i in range(5):
            start = time.perf_counter()
            made = await asyncio.gather(
                *(
                    c.post_workload({"uuid": f"floor-{i}", "core_ids": [str(31 - i)], "policy": "bronze"})
                    for c in clients
                )
            )
            times.append((time.perf_counter() - start) * 1000)
            await asyncio.gather(*(c.delete_workload(m["id"]) for c, m in zip(clients, made, strict=True)))
    return {"floor_post_all_ms_p50": pct(times, 0.5)}


def pods(client: KubeClient, node: str, lister: Lister, count: int) -> dict[str, Any]:
    times = []
    for i in range(count):
        name = f"bench-pod-{i}"
        first = (i % 2) * 16 + 2 * (i // 2)  # alternate the caches: 6 guaranteed ways each
        lister.cpus[("default", name)] = [first, first + 1]
        res = {"cpu": "2", "memory": "64Mi", "intel.com/l3_cache_ways": "1"}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "annotations": {"container1_mba_percentage": "50"},
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "container1", "image": "busybox", "resources": {"requests": res, "limits": res}}
                ],
            },
        }
        start = time.perf_counter()
        client.create("/api/v1/namespaces/default/pods", pod)
        wname = f"{name}-rmd-workload-container1"
        wait_for(f"{wname} enforced", lambda w=wname: _exists_and(client, w), timeout=120, interval=0.02)  # type: ignore[misc]
        times.append((time.perf_counter() - start) * 1000)
    return {"pod_to_enforced_ms_p50": pct(times, 0.5), "pod_to_enforced_ms_p95": pct(times, 0.95)}


def _exists_and(client: KubeClient, name: str) -> bool:
    try:
        return enforced(client, "default", name, "1/1")()
    except Exception:
        return False


def idle(
    seconds: float, label: str, operator: ManagedProcess, agent: ManagedProcess, baseline: ManagedProcess
) -> dict[str, float]:
    """CPU of each process over the same ``seconds`` of idling, in % of one core."""
    procs = {"operator": operator, "agent": agent, "dp_operator_baseline": baseline}
    before = {name: cpu_seconds(p.pid) for name, p in procs.items()}
    time.sleep(seconds)
    return {
        f"{name}_idle_cpu_pct_{label}": round(100 * (cpu_seconds(p.pid) - before[name]) / seconds, 2)
        for name, p in procs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--pods", type=int, default=10)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    bins, reason = find_binaries()
    if bins is None:
        print(reason, file=sys.stderr)
        return 2
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    with (
        tempfile.TemporaryDirectory(prefix="bench-rmd-") as tmp,
        running_control_plane(bins, Path(tmp) / "cp") as cp,
    ):
        work = Path(tmp)
        client = cp.client()
        kubectl(cp, "apply", "-k", str(ROOT / "deploy" / "rmd" / "default"))
        kubectl(cp, "wait", "--for=condition=Established", "crd/rmdworkloads.intel.com", "--timeout=60s")
        kubectl(cp, "scale", "-n", NS, "deployment", "intel-rmd-operator", "--replicas=0")
        certs = subprocess.run(
            [str(Path(sys.executable).parent / "intel-rmd-certs"), "--namespace", NS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        kubectl(cp, "apply", "-f", "-", stdin=certs)
        secrets = {
            d["metadata"]["name"]: {k: v.encode() for k, v in d["stringData"].items()}
            for d in yaml.safe_load_all(certs)
        }
        tls = work / "tls"
        tls.mkdir()
        for name, data in secrets[RMD_CLIENT_SECRET].items():
            (tls / name).write_bytes(data)
        nodes = create_kwok_nodes(client, args.nodes, prefix="bench-rmd-", labels={NFD_RDT_LABEL: "true"})
        shipped = yaml.safe_load((ROOT / "deploy" / "rmd" / "manager" / "rmd-config.yaml").read_text())
        sources: VolumeSources = {
            ("configMap", RMD_CONFIG_MAP): {k: v.encode() for k, v in shipped["data"].items()},
            **{("secret", name): data for name, data in secrets.items()},
        }
        ds = rmd_daemonset(parse(RmdConfigSpec, {}), {"name": "rmdconfig", "uid": "-"}, NS, "-")
        rmd_args = lay_out_container(ds["spec"]["template"]["spec"], "rmd", sources, work / "rmd-root")
        urls_file = work / "urls"
        sim = ManagedProcess(
            "rmd-sim",
            [
                sys.executable,
                "-m",
                "intel_device_plugins.sim.rmd",
                "--root",
                str(work / "rmd-root"),
                *rmd_args,
                "--address",
                "127.0.0.1",
                "--count",
                str(args.nodes),
                "--urls-file",
                str(urls_file),
            ],
            work / "sim.log",
            env=dict(os.environ),
        )
        wait_for("simulated RMDs", urls_file.exists, timeout=60)
        urls = urls_file.read_text().split()
        env = {**os.environ, "POD_NAMESPACE": NS, "POD_NAME": "bench-operator"}
        operator_argv = [
            sys.executable,
            "-m",
            "intel_device_plugins.rmd.operator",
            "--tls-dir",
            str(tls),
            *[f"--rmd-endpoint={n}={u}" for n, u in zip(nodes, urls, strict=True)],
        ]
        operator_env = {**env, "KUBECONFIG": str(cp.service_account_kubeconfig(NS, "intel-rmd-operator"))}
        operator = ManagedProcess(
            "operator",
            [*operator_argv, *EARLIER_PERIODS],
            work / "operator.log",
            env=operator_env,
        )
        baseline = install(cp, work / "dp-operator")
        kubectl(
            cp,
            "apply",
            "-f",
            str(ROOT / "deploy" / "operator" / "samples" / "deviceplugin_v1_gpudeviceplugin.yaml"),
        )
        cap = {"intel.com/l3_cache_ways": "12", "cpu": "32", "memory": "64Gi", "pods": "110"}
        client.request(
            "PATCH",
            f"/api/v1/nodes/{nodes[0]}/status",
            {"status": {"capacity": cap, "allocatable": cap}},
            content_type="application/merge-patch+json",
        )
        lister = Lister()  # type: ignore[abstract]
        grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(lister, grpc_server)
        grpc_server.add_insecure_port(f"unix://{work}/pr.sock")
        grpc_server.start()
        agent = ManagedProcess(
            "agent",
            [
                sys.executable,
                "-m",
                "intel_device_plugins.rmd.nodeagent",
                "--node-name",
                nodes[0],
                "--pod-resources-socket",
                f"unix://{work}/pr.sock",
            ],
            work / "agent.log",
            env={**os.environ, "KUBECONFIG": str(cp.service_account_kubeconfig(NS, "intel-rmd-node-agent"))},
        )
        try:
            cfg = {
                "apiVersion": "intel.com/v1alpha1",
                "kind": "RmdConfig",
                "metadata": {"name": "rmdconfig", "namespace": NS},
                "spec": {},
            }
            kubectl(cp, "apply", "-f", "-", stdin=json.dumps(cfg))
            wait_for(
                "all nodes in RmdConfig status",
                lambda: (
                    len(
                        (client.get(f"{API}/namespaces/{NS}/rmdconfigs/rmdconfig").get("status") or {}).get(
                            "nodes"
                        )
                        or []
                    )
                    == args.nodes
                ),
                timeout=120,
            )
            results: dict[str, Any] = {"nodes": args.nodes}
            results.update(asyncio.run(floor(urls, tls)))
            results.update(enforce(client, cp, args.nodes, args.workloads))
            print(json.dumps(results), flush=True)
            results.update(pods(client, nodes[0], lister, args.pods))
            print(json.dumps(results), flush=True)
            time.sleep(15)  # let the last reconciles settle before measuring idle
            dp_operator = next(o for o in baseline.operators if o.proc.alive()).proc
            results.update(idle(args.idle, "earlier_periods", operator, agent, dp_operator))
            operator.stop()  # the same identity takes its Lease back at once
            operator = ManagedProcess(
                "operator", operator_argv, work / "operator-defaults.log", env=operator_env
            )
            time.sleep(15)  # start-up reads every RMD once; idle begins after that
            results.update(idle(args.idle, "default_period", operator, agent, dp_operator))
            for p in (operator, agent):
                results[f"{p.name}_rss_mib"] = proc_status(p.pid, "VmRSS")
                results[f"{p.name}_peak_rss_mib"] = proc_status(p.pid, "VmHWM")
            probe = subprocess.Popen(
                [sys.executable, "-c", "import intel_device_plugins.rmd.operator, time; time.sleep(30)"]
            )
            time.sleep(8)
            results["floor_import_only_rss_mib"] = proc_status(probe.pid, "VmRSS")
            probe.kill()
            probe.wait()
            forbidden = sum(
                "forbidden" in (work / f).read_text().lower()
                for f in ("operator.log", "operator-defaults.log", "agent.log")
            )
            results["rbac_denials"] = forbidden
            print(json.dumps(results), flush=True)
        finally:
            for p in (agent, operator, sim):
                p.stop()
            baseline.stop()
            grpc_server.stop(None)
            client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
