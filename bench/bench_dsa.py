"""DSA plugin figures: work queues on a large node (8 devices x 8 queues) and vfio-pci mode.

Run from the repository root: ``.venv/bin/python bench/bench_dsa.py`` (about two minutes; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from plugin_bench import HotPlug, PluginBench, main

from intel_device_plugins.sim import idxd
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.profiles import profile_text

SHARED_DEV_NUM = 4
OTHER_PCI_FUNCTIONS = 200
"""Non-DSA PCI functions on the vfio node, which the vfio-pci scan must look at and skip."""


def add_other_pci_functions(tree: FakeTree) -> None:
    for _ in range(OTHER_PCI_FUNCTIONS):
        tree.pci_function(
            tree.next_pci_address(), vendor="0x8086", device="0x09a2", numa_node=0, driver="pcieport"
        )


def add_dedicated_queue(tree: FakeTree) -> Callable[[], None]:
    """A new DSA device with one enabled dedicated queue; removal disables that queue."""
    device = idxd.add_accelerator(tree, "dsa")
    name = idxd.add_work_queue(tree, device, "dsa", 0)
    return lambda: idxd.disable_work_queue(tree, device, "dsa", name)


def add_vfio_function(tree: FakeTree) -> Callable[[], None]:
    """A DSA function bound to vfio-pci; removal unbinds it (its group node goes away)."""
    device = idxd.add_accelerator(tree, "dsa", driver="vfio-pci")
    group = device.name.removeprefix("vfio")

    def remove() -> None:
        tree.remove(f"/sys/bus/pci/drivers/vfio-pci/{device.address}")
        tree.remove(f"{device.sysfs}/driver")
        tree.remove(f"/dev/vfio/{group}")
        tree.uevent("unbind", device.sysfs, "pci", PCI_SLOT_NAME=device.address)
        tree.uevent("remove", f"/sys/devices/virtual/vfio/{group}", "vfio", DEVNAME=f"vfio/{group}")

    return remove


WORK_QUEUES = PluginBench(
    title=f"DSA work queues: 8 devices x 8 queues, -shared-dev-num {SHARED_DEV_NUM}",
    script="intel_dsa_device_plugin",
    cli_module="intel_device_plugins.plugins.dsa.cli",
    node=profile_text("dsa-large"),
    flags=("-shared-dev-num", str(SHARED_DEV_NUM)),
    resource="dsa.intel.com/wq-user-dedicated",
    ids=("wq-user-dedicated-wq0.0-0",),
    hotplug=HotPlug("dsa.intel.com/wq-user-dedicated", add_dedicated_queue),
)

VFIO = PluginBench(
    title=f"DSA vfio-pci: 4 DSA functions among {OTHER_PCI_FUNCTIONS + 4} PCI functions",
    script="intel_dsa_device_plugin",
    cli_module="intel_device_plugins.plugins.dsa.cli",
    node=profile_text("dsa-vfio"),
    prepare=add_other_pci_functions,
    flags=("-driver", "vfio-pci"),
    resource="dsa.intel.com/vfio",
    ids=("0000:10:00.0",),
    hotplug=HotPlug("dsa.intel.com/vfio", add_vfio_function),
)

if __name__ == "__main__":
    raise SystemExit(main(WORK_QUEUES, VFIO))
