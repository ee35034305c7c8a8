"""End-to-end operator figures on a real control plane (the integration harness with kwok nodes).

Expects the CRDs installed and the operator running against the cluster named by ``--kubeconfig``, with its
DaemonSets in ``--namespace``. Two measurements:

- ``latency``: create ``--crs`` GPU CRs one after another; for each, the time from the create call returning
  to the DaemonSet existing (p50/p95/max).
- ``status``: label the ``--nodes`` kwok nodes into 8 pools, create one GPU CR per pool and time until every
  CR's status reports all its nodes desired and ready.

    .venv/bin/python bench/bench_operator_cluster.py --kubeconfig k.yaml --namespace ns latency
    .venv/bin/python bench/bench_operator_cluster.py --kubeconfig k.yaml --namespace ns status --nodes 1000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from lightkube import ApiError, Client, KubeConfig
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node

from intel_device_plugins.operator.controller import cr_resources
from intel_device_plugins.operator.kinds import DeviceKind

GPU = cr_resources()[DeviceKind.GPU]
POOL_LABEL = "bench.intel.com/pool"


def new_cr(name: str, selector: dict[str, str]) -> Any:
    return GPU.from_dict(
        {
            "apiVersion": "deviceplugin.intel.com/v1",
            "kind": "GpuDevicePlugin",
            "metadata": {"name": name},
            "spec": {
                "image": "intel/intel-gpu-plugin:0.36.0",
                "nodeSelector": selector,
                "tolerations": [{"operator": "Exists"}],
            },
        }
    )


def wait_for(probe: Any, limit_s: float, step_s: float = 0.02) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if probe():
            return time.perf_counter() - start
        time.sleep(step_s)
    raise TimeoutError("not reached in time")


def latency(client: Client, namespace: str, count: int) -> dict[str, float]:
    times = []
    for i in range(count):
        name = f"bench-lat-{i}"
        client.create(new_cr(name, {"bench.intel.com/none": "x"}))

        def exists(name: str = name) -> bool:
            try:
                client.get(DaemonSet, DeviceKind.GPU.daemonset_name(name), namespace=namespace)
                return True
            except ApiError:
                return False

        times.append(wait_for(exists, 30) * 1000)
    for i in range(count):
        client.delete(GPU, f"bench-lat-{i}")
    ordered = sorted(times)
    return {
        "crs": count,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        "max_ms": round(max(times), 1),
    }


def status(client: Client, nodes: int, pools: int = 8) -> dict[str, float]:
    names = sorted(n.metadata.name for n in client.list(Node) if n.metadata and n.metadata.name)[:nodes]
    for i, node in enumerate(names):
        client.patch(Node, node, {"metadata": {"labels": {POOL_LABEL: str(i % pools)}}})
    expected = {p: sum(1 for i in range(len(names)) if i % pools == p) for p in range(pools)}
    start = time.perf_counter()
    for p in range(pools):
        client.create(new_cr(f"bench-pool-{p}", {POOL_LABEL: str(p)}))

    def converged() -> bool:
        for p in range(pools):
            st = dict(client.get(GPU, f"bench-pool-{p}")).get("status") or {}
            if not (
                st.get("desiredNumberScheduled") == st.get("numberReady") == expected[p]
                and len(st.get("nodeNames") or ()) == expected[p]
            ):
                return False
        return True

    wait_for(converged, 120, 0.2)
    took = time.perf_counter() - start
    for p in range(pools):
        client.delete(GPU, f"bench-pool-{p}")
    return {"nodes": len(names), "crs": pools, "status_converged_s": round(took, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True, help="namespace of the operator's DaemonSets")
    ap.add_argument("what", choices=("latency", "status"))
    ap.add_argument("--crs", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=1000)
    args = ap.parse_args()
    client = Client(KubeConfig.from_file(args.kubeconfig), field_manager="bench")
    result = (
        latency(client, args.namespace, args.crs) if args.what == "latency" else status(client, args.nodes)
    )
    for k, v in result.items():
        print(f"{k:>20}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
