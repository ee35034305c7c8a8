"""DRA driver start to ResourceSlices published, on a real control plane, against a floor.

Starts a private control plane (pinned kube-apiserver, KCM, scheduler, kwok) and one kwok node, then for
``--runs`` rounds measures, interleaved so load drifts hit both alike:

- ``publish``: what a driver does when it starts: a new REST client (``kube.rest``) from the kubeconfig, a
  ``SlicePublisher`` and ``publish()`` of 16 GPU-like devices (typed attributes, shareable memory and
  millicores capacities), until the call returns with the slice stored. That is a Node GET (owner UID),
  a ResourceSlice LIST and a CREATE; the node's slices are deleted before each round.
- ``calls``: a new client and the same three calls made bare, with the same bodies: what is left is the
  publisher's own work (building, planning, model conversions).
- ``floor``: a new client and one bare CREATE of an equal slice (the same content under another name and
  driver),
  the least any publisher could do.

Prints p50/p95/min of each and the ratios of the medians, as Markdown, and the CPU time of one no-op check
(no API call) for 16 and 200 devices, after a rescan and after a watch event.

    .venv/bin/python bench/bench_dra_publish.py --runs 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    STANDARD_PCIE_ROOT,
    Capacity,
    Device,
    Inventory,
    RequestPolicy,
)
from intel_device_plugins.dra.publisher import SlicePublisher
from intel_device_plugins.dra.slices import desired_slices, plan
from intel_device_plugins.kube.rest import NODES, RESOURCE_SLICES, RestClient, kubeconfig_config
from k8stest.binaries import find_binaries
from k8stest.controlplane import running_control_plane
from k8stest.kwok import create_kwok_nodes

DRIVER = "gpu.intel.com"
FLOOR_DRIVER = "gpu-floor.intel.com"
CARDS = 16


def gpu_inventory(cards: int) -> Inventory:
    return Inventory(
        devices=tuple(
            Device(
                name=f"card{i}",
                attributes={
                    "driver": "i915",
                    "pciId": "0x56a0",
                    "family": "Arc",
                    "model": "A770",
                    "numaNode": i % 2,
                    "sriov": "none",
                    STANDARD_PCI_BUS_ID: f"0000:{i + 3:02x}:00.0",
                    STANDARD_PCIE_ROOT: f"pci0000:{i // 4:02x}",
                },
                capacity={
                    "memory": Capacity("16Gi", RequestPolicy(default="16Gi")),
                    "millicores": Capacity("1000", RequestPolicy(default="1000")),
                },
                allow_multiple_allocations=True,
            )
            for i in range(cards)
        )
    )


async def own_slices(client: RestClient, node: str) -> list[str]:
    listed = await client.list(RESOURCE_SLICES, fields={"spec.driver": DRIVER, "spec.nodeName": node})
    return [s["metadata"]["name"] for s in listed.items]


async def clear(client: RestClient, node: str) -> None:
    for name in await own_slices(client, node):
        await client.delete(RESOURCE_SLICES, name)
    for s in (await client.list(RESOURCE_SLICES, labels={"bench": "floor"})).items:  # the bare paths' slices
        await client.delete(RESOURCE_SLICES, s["metadata"]["name"])


def new_client(kubeconfig: Path) -> RestClient:
    return RestClient(kubeconfig_config(kubeconfig), field_manager="bench")


async def rounds(kubeconfig: Path, node: str, runs: int) -> dict[str, list[float]]:
    inventory = gpu_inventory(CARDS)
    admin = new_client(kubeconfig)
    node_uid = (await admin.get(NODES, node))["metadata"]["uid"]
    assert node_uid
    (template,) = desired_slices(DRIVER, node, node_uid, inventory, generation=1)
    times: dict[str, list[float]] = {"publish": [], "floor": [], "calls": []}
    try:
        for i in range(runs + 1):  # the first round warms caches on both sides and is not counted
            await clear(admin, node)
            order = ("publish", "floor", "calls") if i % 2 else ("calls", "floor", "publish")
            for what in order:
                t0 = time.perf_counter()
                client = new_client(kubeconfig)
                if what == "publish":
                    await SlicePublisher(client, DRIVER, node).publish(inventory)
                else:
                    if what == "calls":  # what the publisher cannot do without: the owner's UID, the slices
                        await client.get(NODES, node)
                        await client.list(
                            RESOURCE_SLICES, fields={"spec.driver": FLOOR_DRIVER, "spec.nodeName": node}
                        )
                    body = {
                        **template,
                        "metadata": {
                            **template["metadata"],
                            "name": f"{what}-{i}",
                            "labels": {"bench": "floor"},
                        },
                        # Another driver: the publisher would take a slice of its own driver and node
                        # for a stray one and delete it.
                        "spec": {
                            **template["spec"],
                            "driver": FLOOR_DRIVER,
                            "pool": {**template["spec"]["pool"], "name": f"{what}-{i}"},
                        },
                    }
                    await client.create(RESOURCE_SLICES, body)
                elapsed = time.perf_counter() - t0
                await client.close()
                if i:
                    times[what].append(elapsed)
            found = await own_slices(admin, node)
            assert len(found) == 1, f"the publisher left {found}"
        await clear(admin, node)
    finally:
        await admin.close()
    return times


def check_costs(cards: int, repeat: int = 200) -> tuple[float, float]:
    """Seconds of CPU for one no-op check against slices equal to the inventory, (a) after a rescan (the
    desired slices built anew, then planned) and (b) after a watch event (planned only: the publisher
    keeps what it built for the inventory it has)."""
    inventory = gpu_inventory(cards)
    held = desired_slices(DRIVER, "node", "uid", inventory, generation=1)
    t0 = time.process_time()
    for _ in range(repeat):
        assert plan(held, desired_slices(DRIVER, "node", "uid", inventory)).empty
    t1 = time.process_time()
    desired = desired_slices(DRIVER, "node", "uid", inventory)
    for _ in range(repeat):
        assert plan(held, desired).empty
    t2 = time.process_time()
    return (t1 - t0) / repeat, (t2 - t1) / repeat


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    bins, reason = find_binaries()
    if bins is None:
        raise SystemExit(reason)
    load = [os.getloadavg()[0]]
    with (
        tempfile.TemporaryDirectory(prefix="bench-dra-") as tmp,
        running_control_plane(bins, Path(tmp)) as cp,
    ):
        client = cp.client()
        try:
            (node,) = create_kwok_nodes(client, 1, prefix="bench-dra-")
        finally:
            client.close()
        load.append(os.getloadavg()[0])
        times = asyncio.run(rounds(cp.admin_kubeconfig, node, args.runs))
        load.append(os.getloadavg()[0])
    print(f"{CARDS} GPU-like devices, {args.runs} rounds, load average {min(load):.2f}-{max(load):.2f}\n")
    print("| path | p50 ms | p95 ms | min ms |")
    print("|---|---|---|---|")
    for what, label in (
        ("publish", "driver start → slices published"),
        ("calls", "the same calls, bare (GET node, LIST slices, CREATE)"),
        ("floor", "one bare CREATE"),
    ):
        values = times[what]
        print(f"| {label} | {ms(values, 0.5)} | {ms(values, 0.95)} | {min(values) * 1000:.1f} |")
    for cards in (CARDS, 200):
        rescan, event = check_costs(cards)
        print(
            f"\nCPU of one no-op check, {cards} devices: {rescan * 1000:.2f} ms after a rescan"
            f" (slices built and planned), {event * 1000:.2f} ms after a watch event (planned)."
        )
    p50 = {what: statistics.median(values) for what, values in times.items()}
    print(
        f"\nPublish p50 is {p50['publish'] / p50['floor']:.2f}x one bare create's"
        f" and {p50['publish'] / p50['calls']:.2f}x its three calls made bare."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
