"""IAA plugin figures: the xeon-accelerators profile (eight IAA devices, one shared queue each).

Run from the repository root: ``.venv/bin/python bench/bench_iaa.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from plugin_bench import PluginBench, main

from intel_device_plugins.sim.profiles import profile_text

SHARED_DEV_NUM = 4

BENCH = PluginBench(
    title=f"IAA: 8 devices x 1 shared queue, -shared-dev-num {SHARED_DEV_NUM}",
    script="intel_iaa_device_plugin",
    cli_module="intel_device_plugins.plugins.iaa.cli",
    node=profile_text("xeon-accelerators"),
    flags=("-shared-dev-num", str(SHARED_DEV_NUM)),
    resource="iaa.intel.com/wq-user-shared",
    ids=("wq-user-shared-wq8.0-0",),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
