"""Claim → pod Running on one real node, for the DRA driver of each kind other than GPU.

One node (``k8stest.node.drakinds.KINDS_NODE_PROFILE``: DSA, IAA, SGX, DLB, NPU, QAT and FPGA devices) runs
each kind's driver from ``deploy/dra/<kind>``, as the end-to-end tests do. A round creates, for
every kind, a pod with one claim from a ResourceClaimTemplate of one of the kind's DeviceClasses
and times it from creation to phase Running (KCM makes the claim, the scheduler allocates from the
driver's slices, the kubelet calls the driver's NodePrepareResources, containerd reads the
per-claim CDI spec); and the same pod without any claim, the floor. The pods of a round take turns
in an order that rotates from round to round, so that all see the same load of the shared machine.
Each pod and its claim are deleted, and the driver seen to hold nothing of the claim, outside the
timing.

Usage (root, after `make k8s-bins node-bins images`):
    .venv/bin/python bench/bench_dra_kinds_node.py --runs 10
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
from functools import partial
from pathlib import Path
from typing import Any

from plugin_bench import LoadAverage

from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.binaries import find_binaries
from k8stest.kubeclient import JSON, KubeClient, wait_for
from k8stest.node import (
    NodeConfig,
    RealNode,
    find_node_binaries,
    node_unavailable_reason,
    start_node_control_plane,
    start_real_node,
    write_test_images,
)
from k8stest.node.dra import claim_template
from k8stest.node.dradriver import DraDriver, install_dra_driver
from k8stest.node.drakinds import (
    KINDS_NODE_NAME,
    KINDS_NODE_PROFILE,
    PODS,
    claim_pod,
    delete_pod_and_claims,
)
from k8stest.node.plugins import node_image_archive

# Kind (deploy/dra/<kind>) -> the DeviceClass its claims ask for.
CLASSES = {
    "dsa": "wq-user-shared.dsa.intel.com",
    "sgx": "enclave.sgx.intel.com",
    "dlb": "pf.dlb.intel.com",
    "npu": "accel.npu.intel.com",
    "qat": "cy.qat.intel.com",
    "iaa": "wq-user-dedicated.iaa.intel.com",
    "fpga": "fpga.intel.com",  # the shipped af mode: a port running its function, no programming
}
FLOOR = "no_device"


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "p50": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
        "all": [round(v, 2) for v in values],
    }


def _running_seconds(client: KubeClient, node: RealNode, pod: JSON, drivers: list[str]) -> float:
    """Pod created → phase Running; then the pod and its claims are deleted outside the timing."""
    name = pod["metadata"]["name"]
    path = f"{PODS}/{name}"
    t0 = time.monotonic()
    client.create(PODS, pod)

    def running() -> bool:
        node.check_alive()
        phase = client.get(path).get("status", {}).get("phase")
        if phase in ("Failed", "Succeeded"):
            raise SystemExit(f"pod {name} ended ({phase}) before it was seen Running")
        return bool(phase == "Running")

    try:
        wait_for(f"pod {name} Running", running, timeout=120, interval=0.05)
        return time.monotonic() - t0
    finally:
        delete_pod_and_claims(client, node, name, drivers)


@contextmanager
def _kinds_node(work: Path) -> Iterator[tuple[Any, KubeClient, RealNode]]:
    bins, reason = find_binaries()
    node_bins, node_reason = find_node_binaries()
    problem = reason or node_reason or node_unavailable_reason()
    if bins is None or node_bins is None or problem:
        raise SystemExit(problem)
    archive = node_image_archive()
    if archive is None:
        raise SystemExit("no node image archive: run `make images`")
    build_node(parse_node_spec(KINDS_NODE_PROFILE, "KINDS_NODE_PROFILE"), work / "sim")
    busybox = write_test_images(node_bins, work / "images.tar")
    cp = start_node_control_plane(bins, work / "cp")
    client = cp.client()
    try:
        node = start_real_node(
            node_bins,
            cp,
            work / "node",
            NodeConfig(name=KINDS_NODE_NAME),
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


def bench(runs: int) -> dict[str, Any]:
    load = LoadAverage()
    keys = [*CLASSES, FLOOR]
    times: dict[str, list[float]] = {key: [] for key in keys}
    installed: dict[str, DraDriver] = {}
    with (
        tempfile.TemporaryDirectory(prefix="dra-kinds-bench-") as tmp,
        _kinds_node(Path(tmp)) as (
            cp,
            client,
            node,
        ),
    ):
        for kind, class_name in CLASSES.items():
            installed[kind] = install_dra_driver(cp, node, kind, Path(tmp) / "install")
            template = claim_template(f"bench-{kind}", class_name)
            template["metadata"]["namespace"] = "default"
            client.create("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates", template)
        for kind, driver in installed.items():
            # Some device of the kind published before the first claim: the scheduler sees it.
            wait_for(f"{kind} slices", partial(driver.slices, client), timeout=120)
        drivers = [d.driver for d in installed.values()]
        load.sample()
        for run in range(runs):
            order = keys[run % len(keys) :] + keys[: run % len(keys)]
            for key in order:
                templates = {} if key == FLOOR else {"dev": f"bench-{key}"}
                pod = claim_pod(f"{key.replace('_', '-')}-{run}", node.name, templates, script="sleep 3600")
                pod["spec"]["terminationGracePeriodSeconds"] = 0
                times[key].append(_running_seconds(client, node, pod, drivers))
        load.sample()
    return {
        "runs": runs,
        "load_average_1min": load.text(),
        "classes": CLASSES,
        **{f"{key}_pod_created_to_running_s": _summary(values) for key, values in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="pods of each kind (default 10)")
    args = ap.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    result = bench(args.runs)
    print(json.dumps({"command": command, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
