"""DSA plugin figures: work queues on a large node (8 devices x 8 queues) and vfio-pci mode.

Run: ``.venv/bin/python bench/bench_dsa.py`` (about a minute; prints Markdown).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from plugin_bench import allocation_cost_us, measure_process, report, scan_cost

from intel_device_plugins.plugins.idxd.discovery import DSA
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin, WorkQueuePlugin
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from intel_device_plugins.sim.profiles import profile_text

SHARED_DEV_NUM = 4
OTHER_PCI_FUNCTIONS = 200
"""Non-DSA PCI functions on the vfio node, which the vfio-pci scan must look at and skip."""


def add_other_pci_functions(tree: FakeTree, count: int) -> None:
    for _ in range(count):
        tree.pci_function(
            tree.next_pci_address(), vendor="0x8086", device="0x09a2", numa_node=0, driver="pcieport"
        )


def plugin_command(root: Path, plugin_dir: Path, *flags: str) -> list[str]:
    return [
        console_script("intel_dsa_device_plugin"),
        "-prefix",
        str(root),
        "-device-plugin-dir",
        str(plugin_dir),
        *flags,
    ]


async def run(workdir: Path) -> str:
    sections = []
    root, plugin_dir = workdir / "wq-node", workdir / "dp-wq"
    build_node(parse_node_spec(profile_text("dsa-large")), root)
    queues = WorkQueuePlugin(DSA, prefix=str(root), shared_dev_num=SHARED_DEV_NUM)
    scan = scan_cost(queues.scan, 300)
    allocation = allocation_cost_us(queues, "wq-user-dedicated", ["wq-user-dedicated-wq0.0-0"])
    figures = await measure_process(
        plugin_command(root, plugin_dir, "-shared-dev-num", str(SHARED_DEV_NUM)),
        workdir,
        plugin_dir,
        "dsa.intel.com-wq-user-dedicated.sock",
        "dsa.intel.com/wq-user-dedicated",
        ["wq-user-dedicated-wq0.0-0"],
    )
    sections.append(
        report(
            f"DSA work queues: 8 devices x 8 queues, -shared-dev-num {SHARED_DEV_NUM}",
            scan,
            figures,
            allocation,
        )
    )

    root, plugin_dir = workdir / "vfio-node", workdir / "dp-vfio"
    tree = build_node(parse_node_spec(profile_text("dsa-vfio")), root)
    add_other_pci_functions(tree, OTHER_PCI_FUNCTIONS)
    vfio = DsaVfioPlugin(prefix=str(root))
    scan = scan_cost(vfio.scan, 300)
    allocation = allocation_cost_us(vfio, "vfio", ["0000:10:00.0"])
    figures = await measure_process(
        plugin_command(root, plugin_dir, "-driver", "vfio-pci"),
        workdir,
        plugin_dir,
        "dsa.intel.com-vfio.sock",
        "dsa.intel.com/vfio",
        ["0000:10:00.0"],
    )
    sections.append(
        report(
            f"DSA vfio-pci: 4 DSA functions among {OTHER_PCI_FUNCTIONS + 4} PCI functions",
            scan,
            figures,
            allocation,
        )
    )
    return "\n".join(sections)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-dsa-") as workdir:
        print(asyncio.run(run(Path(workdir))))


if __name__ == "__main__":
    main()
