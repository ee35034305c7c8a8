"""NPU plugin figures: the client profile (one NPU), -shared-dev-num 4.

Run: ``.venv/bin/python bench/bench_npu.py`` (about half a minute; prints Markdown).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from plugin_bench import allocation_cost_us, measure_process, report, scan_cost

from intel_device_plugins.plugins.npu.plugin import NpuPlugin
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from intel_device_plugins.sim.profiles import profile_text


async def run(workdir: Path) -> str:
    root, plugin_dir = workdir / "node", workdir / "dp"
    build_node(parse_node_spec(profile_text("npu-client")), root)
    plugin = NpuPlugin(prefix=str(root), shared_dev_num=4)
    scan = scan_cost(plugin.scan, 300)
    allocation = allocation_cost_us(plugin, "accel", ["accel0-2"])
    command = [
        console_script("intel_npu_device_plugin"),
        "-prefix",
        str(root),
        "-device-plugin-dir",
        str(plugin_dir),
        "-shared-dev-num",
        "4",
    ]
    figures = await measure_process(
        command, workdir, plugin_dir, "npu.intel.com-accel.sock", "npu.intel.com/accel", ["accel0-2"]
    )
    return report("NPU: one NPU, -shared-dev-num 4", scan, figures, allocation)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-npu-") as workdir:
        print(asyncio.run(run(Path(workdir))))


if __name__ == "__main__":
    main()
