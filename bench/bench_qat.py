"""QAT plugin figures: 64 VFs over four 4xxx PFs, all bound to vfio-pci (DPDK mode, the default).

Run from the repository root: ``.venv/bin/python bench/bench_qat.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from plugin_bench import PluginBench, main

NODE = """
[node]
numa_nodes = 2
[[qat]]
count = 2
vfs = 16
numa_node = 0
services = "sym;asym"
[[qat]]
count = 2
vfs = 16
numa_node = 1
services = "dc"
"""

BENCH = PluginBench(
    title="QAT: 4 PFs x 16 VFs on vfio-pci",
    script="intel_qat_device_plugin",
    cli_module="intel_device_plugins.plugins.qat.cli",
    node=NODE,
    resource="qat.intel.com/cy",
    ids=("0000:10:00.1",),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
