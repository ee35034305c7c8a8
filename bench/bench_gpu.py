"""GPU plugin figures on a 16-card node (-shared-dev-num 2, -enable-monitoring).

Run from the repository root: ``.venv/bin/python bench/bench_gpu.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from plugin_bench import HotPlug, PluginBench, Targets, main

from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree

CARDS = 16
NODE = f"""
[node]
numa_nodes = 2
[[gpu]]
count = {CARDS // 2}
numa_node = 0
mei = true
[[gpu]]
count = {CARDS // 2}
numa_node = 1
"""


def add_card(tree: FakeTree) -> Callable[[], None]:
    card = gpu.add_card(tree, numa_node=1)
    return lambda: gpu.remove_card(tree, card.index)


BENCH = PluginBench(
    title=f"GPU: {CARDS} cards, -shared-dev-num 2, -enable-monitoring",
    script="intel_gpu_device_plugin",
    cli_module="intel_device_plugins.plugins.gpu.cli",
    node=NODE,
    flags=("-shared-dev-num", "2", "-enable-monitoring"),
    resource="gpu.intel.com/i915",
    ids=("card0-0",),
    hotplug=HotPlug("gpu.intel.com/i915", add_card),
    targets=Targets(scan_ms=2.0, idle_percent=0.07, hotplug_ms=50.0),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
