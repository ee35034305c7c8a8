"""FPGA plugin figures: four cards with four ports each (DFL driver), in af and region modes.

Run from the repository root: ``.venv/bin/python bench/bench_fpga.py`` (about two minutes; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from plugin_bench import HotPlug, PluginBench, main

from intel_device_plugins.plugins.fpga.discovery import af_resource_name
from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree

NODE = """
[node]
numa_nodes = 2
[[fpga]]
driver = "dfl"
count = 2
ports = 4
numa_node = 0
[[fpga]]
driver = "dfl"
count = 2
ports = 4
numa_node = 1
"""
AF = "fpga.intel.com/" + af_resource_name(fpga.ARRIA10_INTERFACE, fpga.NLB0_AFU)
REGION = f"fpga.intel.com/region-{fpga.ARRIA10_INTERFACE}"


def add_card(tree: FakeTree) -> Callable[[], None]:
    card = fpga.add_fpga(tree, driver=fpga.DFL, ports=4)
    return lambda: fpga.remove_fpga(tree, card)


BENCHES = (
    PluginBench(
        title="FPGA af mode: 4 cards x 4 ports (16 devices)",
        script="intel_fpga_device_plugin",
        cli_module="intel_device_plugins.plugins.fpga.cli",
        node=NODE,
        resource=AF,
        ids=("dfl-port.0",),
        flags=("-mode", "af", "-node-name", ""),
        hotplug=HotPlug(AF, add_card),
    ),
    PluginBench(
        title="FPGA region mode: 4 cards x 4 ports (4 regions, CDI hook)",
        script="intel_fpga_device_plugin",
        cli_module="intel_device_plugins.plugins.fpga.cli",
        node=NODE,
        resource=REGION,
        ids=("dfl-fme.0",),
        flags=("-mode", "region", "-node-name", ""),
        hotplug=HotPlug(REGION, add_card),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(*BENCHES))
