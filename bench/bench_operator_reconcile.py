"""Operator-side cost of reconciling: 8 GPU CRs whose plugins cover 1000 nodes, against an in-memory API.

No API server is involved, so this isolates what the operator itself spends per reconcile (planning the
DaemonSet, summarising 1000 pods, conflict detection, status) and its memory while doing it. The end-to-end
figures (CR → DaemonSet p95, status over 1000 kwok nodes) need the real control plane.

    .venv/bin/python bench/bench_operator_reconcile.py --nodes 1000 --crs 8 --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import resource
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod

from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.operator.controller import ControllerConfig, Reconciler
from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind

NS = "bench"


class MemoryApi:
    """Serves the calls a reconcile makes from prepared objects, as the API server would return them."""

    def __init__(self, crs: int, nodes: int) -> None:
        self.crs: dict[str, dict[str, Any]] = {
            f"gpu-{i}": {
                "apiVersion": "deviceplugin.intel.com/v1",
                "kind": "GpuDevicePlugin",
                "metadata": {"name": f"gpu-{i}", "uid": f"u{i}", "generation": 1},
                "spec": {"image": node_image(), "nodeSelector": {"pool": str(i)}},
            }
            for i in range(crs)
        }
        self.pods = [
            Pod.from_dict(
                {
                    "metadata": {
                        "name": f"p{n}",
                        "namespace": NS,
                        "labels": {"app": "intel-gpu-plugin"},
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "DaemonSet",
                                "uid": "x",
                                "name": f"intel-gpu-plugin-gpu-{n % crs}",
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {"nodeName": f"node-{n}", "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Running"},
                }
            )
            for n in range(nodes)
        ]
        self.per_cr = nodes // crs

    async def get(self, res: Any, name: str) -> Any:
        return res.from_dict(copy.deepcopy(self.crs[name]))

    async def patch(self, res: Any, name: str, obj: Any, **kw: Any) -> Any:
        if res is DaemonSet:
            out = copy.deepcopy(obj)
            out["metadata"]["uid"] = "d-" + name
            out["status"] = {
                "desiredNumberScheduled": self.per_cr,
                "numberReady": self.per_cr,
                "currentNumberScheduled": self.per_cr,
                "numberMisscheduled": 0,
            }
            return DaemonSet.from_dict(out)
        self.crs[name]["status"] = obj["status"]
        return None

    def list(self, res: Any, **kw: Any) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            for p in self.pods:
                yield p

        return gen()

    async def create(self, obj: Any) -> Any:
        return obj


async def run(crs: int, nodes: int, rounds: int) -> dict[str, float]:
    api = MemoryApi(crs, nodes)
    rec = Reconciler(cast(AsyncClient, api), ControllerConfig(NS, ALL_KINDS, {}), Metrics())
    times: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for name in api.crs:
            await rec.reconcile(DeviceKind.GPU, name)
        times.append((time.perf_counter() - start) * 1000)
    assert all(len(cr["status"]["nodeNames"]) == nodes // crs for cr in api.crs.values())
    return {
        "crs": crs,
        "nodes": nodes,
        "all_crs_ms_median": round(statistics.median(times), 1),
        "all_crs_ms_max": round(max(times), 1),
        "per_reconcile_ms": round(statistics.median(times) / crs, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--crs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    result = asyncio.run(run(args.crs, args.nodes, args.rounds))
    for k, v in result.items():
        print(f"{k:>18}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
