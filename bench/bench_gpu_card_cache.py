"""Steady-state GPU scan with the card fact cache: the check that follows re-binds against the one before.

The cache keeps each card's static facts between scans. Since it also follows a driver re-bind that
renumbers the DRM minors, each scan stats the PCI function's ``drm/`` directory besides the function's
own directory and checks the card's name against the kept facts. This measures what that costs:
``scan_gpus`` with a warm cache on a 16-card node (``-shared-dev-num 2``, monitoring on, MEI nodes on half
the cards), alternating the current cache and one keyed on the PCI function's directory only (the
previous rule, reproduced here), so load from elsewhere hits both alike.

Prints Markdown. Run from the repository root::

    .venv/bin/python bench/bench_gpu_card_cache.py --rounds 1000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from intel_device_plugins.plugins.gpu.discovery import (
    CardFacts,
    CardFactsCache,
    GpuOptions,
    read_card_facts,
    scan_gpus,
)
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sysfs import identity

NODE = """
[node]
numa_nodes = 2
[[gpu]]
count = 8
numa_node = 0
mei = true
[[gpu]]
count = 8
numa_node = 1
"""


class PciDirectoryOnlyCache(CardFactsCache):
    """The baseline: facts kept while the PCI function's directory keeps its inode and change time."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: dict[str, tuple[tuple[int, int] | None, CardFacts]] = {}

    def get(self, device_dir: str, pci_dir: str, sys_devices: str, card: str = "") -> CardFacts | str:
        current = identity(pci_dir)
        kept = self.kept.get(pci_dir)
        if kept is not None and current is not None and kept[0] == current:
            return kept[1]
        facts = read_card_facts(device_dir, pci_dir, sys_devices)
        if isinstance(facts, CardFacts):
            self.kept[pci_dir] = (current, facts)
        return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    args = parser.parse_args()
    options = GpuOptions(shared_dev_num=2, enable_monitoring=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = str(build_node(parse_node_spec(NODE), Path(scratch) / "node").root)
        caches = {
            "PCI function directory only (before)": PciDirectoryOnlyCache(),
            "plus drm/ directory and card name (now)": CardFactsCache(),
        }
        fresh = scan_gpus(root, options)
        for cache in caches.values():
            assert scan_gpus(root, options, cache) == fresh  # warm, and both give the same answer
        times: dict[str, list[float]] = {name: [] for name in caches}
        for _ in range(args.rounds):
            for name, cache in caches.items():
                started = time.perf_counter()
                scan_gpus(root, options, cache)
                times[name].append(time.perf_counter() - started)
    print(f"| cache ({args.rounds} warm scans each, 16 cards) | median | p90 |")
    print("|---|---|---|")
    for name, samples in times.items():
        p90 = statistics.quantiles(samples, n=10)[8]
        print(f"| {name} | {statistics.median(samples) * 1000:.2f} ms | {p90 * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
