"""DLB plugin figures: four PFs with 16 VFs each plus two whole PFs (66 devices).

Run from the repository root: ``.venv/bin/python bench/bench_dlb.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from plugin_bench import HotPlug, PluginBench, main

from intel_device_plugins.sim import dlb
from intel_device_plugins.sim.fakefs import FakeTree

NODE = """
[node]
numa_nodes = 2
[[dlb]]
count = 4
vfs = 16
numa_node = 1
[[dlb]]
count = 2
numa_node = 0
"""


def add_pf(tree: FakeTree) -> Callable[[], None]:
    device = dlb.add_dlb(tree, numa_node=0)
    return lambda: dlb.remove_dlb(tree, device.name)


BENCH = PluginBench(
    title="DLB: 4 PFs x 16 VFs + 2 PFs",
    script="intel_dlb_device_plugin",
    cli_module="intel_device_plugins.plugins.dlb.cli",
    node=NODE,
    resource="dlb.intel.com/vf",
    ids=("/dev/dlb1",),
    hotplug=HotPlug("dlb.intel.com/pf", add_pf),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
