"""NPU plugin figures: the client profile (one NPU), -shared-dev-num 4.

Run from the repository root: ``.venv/bin/python bench/bench_npu.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from plugin_bench import HotPlug, PluginBench, main

from intel_device_plugins.sim import npu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.profiles import profile_text


def add_npu(tree: FakeTree) -> Callable[[], None]:
    device = npu.add_npu(tree)
    return lambda: npu.remove_npu(tree, device.name)


BENCH = PluginBench(
    title="NPU: one NPU, -shared-dev-num 4",
    script="intel_npu_device_plugin",
    cli_module="intel_device_plugins.plugins.npu.cli",
    node=profile_text("npu-client"),
    flags=("-shared-dev-num", "4"),
    resource="npu.intel.com/accel",
    ids=("accel0-2",),
    hotplug=HotPlug("npu.intel.com/accel", add_npu),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
