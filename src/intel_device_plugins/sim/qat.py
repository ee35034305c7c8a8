"""Simulated Intel QAT devices, laid out as the kernel does.

A PF ``0000:bb:00.0`` bound to its PF driver (``4xxx``…) carries ``sriov_numvfs``, ``qat/state``,
``qat/cfg_services`` and ``virtfnN`` links; its VFs are siblings ``0000:bb:00.1``… with a ``physfn``
link, an IOMMU group (``/sys/kernel/iommu_groups/N``, ``/dev/vfio/N`` once bound to vfio-pci) or a
uio device when bound to igb_uio. debugfs holds ``qat_<driver>_<pf>/dev_cfg`` and
``heartbeat/status``. ``vm = true`` creates only VFs, as a guest sees them. Device changes are
announced with the kernel's uevents (``pci``, ``vfio``, ``uio``); debugfs and ``qat/state`` changes
are not.

:class:`FakeTreeBinder` plays the kernel's part when a test binds a VF to another driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

GENERATIONS: Mapping[str, tuple[str, str]] = {
    "4xxx": ("0x4940", "0x4941"),
    "420xx": ("0x4946", "0x4947"),
    "6xxx": ("0x4948", "0x4949"),
    "c6xx": ("0x37c8", "0x37c9"),
    "dh895xcc": ("0x0435", "0x0443"),
    "c3xxx": ("0x19e2", "0x19e3"),
    "c4xxx": ("0x18a0", "0x18a1"),
    "d15xx": ("0x6f54", "0x6f55"),
}
"""PF driver → (PF device ID, VF device ID)."""

DEFAULTS: Mapping[str, Any] = {
    "generation": "4xxx",
    "count": 1,
    "vfs": 16,
    "numa_node": 0,
    "services": "sym;asym",
    "state": "up",
    "vf_driver": "vfio-pci",
    "heartbeat": "0",
    "dev_cfg": True,
    "behind_bridge": False,
    "iommu": "vfio",
    "vm": False,
}

QAT_CLASS = "0x0b4000"


@dataclass(frozen=True)
class SimulatedPf:
    address: str
    driver: str
    vfs: tuple[str, ...]


def _vf_address(pf_address: str, index: int) -> str:
    """VF ``index`` (0-based) of a PF at function 0: device/function numbers count up after it."""
    devfn = index + 1
    return f"{pf_address[:8]}{devfn // 8:02x}.{devfn % 8:x}"


def load_driver(tree: FakeTree, driver: str) -> None:
    """A loaded driver: its directory with the ``bind``/``unbind`` attributes a real one has."""
    tree.mkdir(f"/sys/bus/pci/drivers/{driver}")
    for attribute in ("bind", "unbind"):
        if not tree.path(f"/sys/bus/pci/drivers/{driver}/{attribute}").exists():
            tree.write(f"/sys/bus/pci/drivers/{driver}/{attribute}")


def _next_index(tree: FakeTree, directory: str, prefix: str) -> int:
    path = tree.path(directory)
    used = {int(p.name[len(prefix) :]) for p in path.glob(f"{prefix}*") if p.name[len(prefix) :].isdigit()}
    index = 0
    while index in used:
        index += 1
    return index


def _iommu_group(tree: FakeTree, address: str, sysfs: str, noiommu: bool) -> int:
    group = _next_index(tree, "/sys/kernel/iommu_groups", "")
    group_dir = f"/sys/kernel/iommu_groups/{group}"
    tree.mkdir(f"{group_dir}/devices")
    tree.link(f"{group_dir}/devices/{address}", sysfs)
    if noiommu:
        tree.write(f"{group_dir}/name", "vfio-noiommu\n")
    tree.link(f"{sysfs}/iommu_group", group_dir)
    return group


def vfio_node_name(tree: FakeTree, sysfs: str) -> str:
    group_dir = tree.path(sysfs) / "iommu_group"
    group = group_dir.resolve().name
    name_file = group_dir.resolve() / "name"
    noiommu = name_file.exists() and name_file.read_text().strip() == "vfio-noiommu"
    return f"noiommu-{group}" if noiommu else group


def attach_driver(tree: FakeTree, address: str, driver: str) -> None:
    """Bind a VF to ``driver`` and create what that driver creates (vfio group node, uio device)."""
    sysfs = tree.sysfs_of(address)
    load_driver(tree, driver)
    tree.bind(address, sysfs, driver)
    if driver == "vfio-pci":
        if not tree.path("/dev/vfio/vfio").exists():  # on a real node it is a character device
            tree.device_node("/dev/vfio/vfio")
        group = vfio_node_name(tree, sysfs)
        tree.device_node(f"/dev/vfio/{group}")
        tree.uevent("add", f"/sys/devices/virtual/vfio/{group}", "vfio", DEVNAME=f"vfio/{group}")
    elif driver == "igb_uio":
        uio = f"uio{_next_index(tree, '/sys/class/uio', 'uio')}"
        tree.mkdir(f"{sysfs}/uio/{uio}")
        tree.link(f"{sysfs}/uio/{uio}/device", sysfs)
        tree.link(f"/sys/class/uio/{uio}", f"{sysfs}/uio/{uio}")
        tree.device_node(f"/dev/{uio}")
        tree.uevent("add", f"{sysfs}/uio/{uio}", "uio", DEVNAME=uio)
    tree.uevent("bind", sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=address)


def detach_driver(tree: FakeTree, address: str) -> str:
    """Unbind a VF; returns the driver it had (``""`` if none)."""
    sysfs = tree.sysfs_of(address)
    driver_link = tree.path(f"{sysfs}/driver")
    if not driver_link.is_symlink():
        return ""
    driver = driver_link.resolve().name
    tree.remove(f"{sysfs}/driver")
    tree.remove(f"/sys/bus/pci/drivers/{driver}/{address}")
    if driver == "igb_uio":
        for uio in list(tree.path(f"{sysfs}/uio").glob("uio*")):
            tree.remove(f"/sys/class/uio/{uio.name}")
            tree.remove(f"/dev/{uio.name}")
            tree.uevent("remove", f"{sysfs}/uio/{uio.name}", "uio", DEVNAME=uio.name)
        tree.remove(f"{sysfs}/uio")
    elif driver == "vfio-pci":
        group = vfio_node_name(tree, sysfs)
        tree.remove(f"/dev/vfio/{group}")
        tree.uevent("remove", f"/sys/devices/virtual/vfio/{group}", "vfio", DEVNAME=f"vfio/{group}")
    tree.uevent("unbind", sysfs, "pci", PCI_SLOT_NAME=address)
    return driver


@dataclass(frozen=True)
class FakeTreeBinder:
    """The kernel's side of ``unbind``/``bind`` on a simulated node (for tests and benchmarks)."""

    tree: FakeTree

    def rebind(self, address: str, current: str, target: str) -> None:
        if not self.tree.path(f"/sys/bus/pci/drivers/{target}/bind").exists():
            raise OSError(f"binding to {target} failed: driver {target} is not loaded")
        detach_driver(self.tree, address)
        attach_driver(self.tree, address, target)


def add_pf(
    tree: FakeTree,
    *,
    generation: str = "4xxx",
    vfs: int = 16,
    numa_node: int = 0,
    services: str = "sym;asym",
    state: str = "up",
    vf_driver: str = "vfio-pci",
    heartbeat: str = "0",
    dev_cfg: bool = True,
    behind_bridge: bool = False,
    iommu: str = "vfio",
) -> SimulatedPf:
    """One QAT PF with ``vfs`` VFs bound to ``vf_driver`` (``""``: unbound)."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown QAT generation {generation!r} (known: {', '.join(GENERATIONS)})")
    pf_id, vf_id = GENERATIONS[generation]
    address = tree.next_pci_address()
    parent = None
    if behind_bridge:
        # A root port on its own bus: the PF is one level deeper than the root complex.
        bridge_bus = tree.next_pci_address()[5:7]
        parent = f"/sys/devices/pci0000:{bridge_bus}/0000:{bridge_bus}:01.0"
        tree.write(f"{parent}/numa_node", f"{numa_node}\n")
    load_driver(tree, generation)
    pf = tree.pci_function(
        address,
        vendor="0x8086",
        device=pf_id,
        numa_node=numa_node,
        driver=generation,
        pci_class=QAT_CLASS,
        parent=parent,
    )
    pf_sysfs = tree.sysfs_of(address)
    tree.uevent("add", pf_sysfs, "pci", PCI_SLOT_NAME=address)
    tree.uevent("bind", pf_sysfs, "pci", DRIVER=generation, PCI_SLOT_NAME=address)
    tree.write(f"{pf_sysfs}/sriov_totalvfs", f"{max(vfs, 16)}\n")
    tree.write(f"{pf_sysfs}/sriov_numvfs", f"{vfs}\n")
    tree.write(f"{pf_sysfs}/qat/state", f"{state}\n")
    tree.write(f"{pf_sysfs}/qat/cfg_services", f"{services}\n")
    debugfs = f"/sys/kernel/debug/qat_{generation}_{address}"
    if dev_cfg:
        tree.write(f"{debugfs}/dev_cfg", f"[GENERAL]\nServicesEnabled = {services}\nConfigVersion = 2\n")
    if heartbeat:
        tree.write(f"{debugfs}/heartbeat/status", f"{heartbeat}\n")
    parent_dir = pf_sysfs.rsplit("/", 1)[0]
    addresses = []
    for index in range(vfs):
        vf_address = _vf_address(pf.address, index)
        tree.pci_function(
            vf_address,
            vendor="0x8086",
            device=vf_id,
            numa_node=numa_node,
            driver=None,
            pci_class=QAT_CLASS,
            parent=parent_dir,
        )
        vf_sysfs = tree.sysfs_of(vf_address)
        tree.link(f"{vf_sysfs}/physfn", pf_sysfs)
        tree.link(f"{pf_sysfs}/virtfn{index}", vf_sysfs)
        _iommu_group(tree, vf_address, vf_sysfs, noiommu=iommu == "noiommu")
        tree.uevent("add", vf_sysfs, "pci", PCI_SLOT_NAME=vf_address)  # what a sriov_numvfs write sends
        if vf_driver:
            attach_driver(tree, vf_address, vf_driver)
        addresses.append(vf_address)
    return SimulatedPf(address, generation, tuple(addresses))


def remove_vfs(tree: FakeTree, pf: SimulatedPf) -> None:
    """``sriov_numvfs`` set to 0: every VF of ``pf`` is unbound and removed, with the kernel's events."""
    pf_sysfs = tree.sysfs_of(pf.address)
    for index, address in enumerate(pf.vfs):
        sysfs = tree.sysfs_of(address)
        detach_driver(tree, address)
        group = tree.path(f"{sysfs}/iommu_group").resolve()
        tree.remove(f"{pf_sysfs}/virtfn{index}")
        tree.remove(f"/sys/bus/pci/devices/{address}")
        tree.remove(f"/sys/kernel/iommu_groups/{group.name}")
        tree.remove(sysfs)
        tree.uevent("remove", sysfs, "pci", PCI_SLOT_NAME=address)
    tree.write(f"{pf_sysfs}/sriov_numvfs", "0\n")


def remove_pf(tree: FakeTree, pf: SimulatedPf) -> None:
    """Hot-unplug a PF: its VFs go first (as :func:`remove_vfs`), then its debugfs entries and the
    function itself, with the kernel's events."""
    remove_vfs(tree, pf)
    tree.remove(f"/sys/kernel/debug/qat_{pf.driver}_{pf.address}")
    pf_sysfs = tree.remove_pci_function(pf.address)
    tree.uevent("unbind", pf_sysfs, "pci", PCI_SLOT_NAME=pf.address)
    tree.uevent("remove", pf_sysfs, "pci", PCI_SLOT_NAME=pf.address)


def add_guest_vfs(
    tree: FakeTree, *, generation: str, vfs: int, numa_node: int, vf_driver: str, iommu: str
) -> list[str]:
    """VFs passed through to a VM: no PF, each VF on its own bus as a hypervisor places them."""
    vf_id = GENERATIONS[generation][1]
    addresses = []
    for _ in range(vfs):
        address = tree.next_pci_address()
        tree.pci_function(
            address, vendor="0x8086", device=vf_id, numa_node=numa_node, driver=None, pci_class=QAT_CLASS
        )
        sysfs = tree.sysfs_of(address)
        _iommu_group(tree, address, sysfs, noiommu=iommu == "noiommu")
        tree.uevent("add", sysfs, "pci", PCI_SLOT_NAME=address)
        if vf_driver:
            attach_driver(tree, address, vf_driver)
        addresses.append(address)
    return addresses


def _generation(options: Mapping[str, Any]) -> str:
    generation = str(options["generation"])
    if generation not in GENERATIONS:
        raise ValueError(f"unknown QAT generation {generation!r} (known: {', '.join(GENERATIONS)})")
    return generation


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[qat]]`` entry: ``count`` PFs with ``vfs`` VFs each (or guest VFs with ``vm``)."""
    for entry in entries:
        options = entry_options(entry, "qat", DEFAULTS)
        generation = _generation(options)
        if options["iommu"] not in ("vfio", "noiommu"):
            raise ValueError(f"iommu must be 'vfio' or 'noiommu', not {options['iommu']!r}")
        for _ in range(int(options["count"])):
            if options["vm"]:
                add_guest_vfs(
                    tree,
                    generation=generation,
                    vfs=int(options["vfs"]),
                    numa_node=int(options["numa_node"]),
                    vf_driver=str(options["vf_driver"]),
                    iommu=str(options["iommu"]),
                )
                continue
            add_pf(
                tree,
                generation=generation,
                vfs=int(options["vfs"]),
                numa_node=int(options["numa_node"]),
                services=str(options["services"]),
                state=str(options["state"]),
                vf_driver=str(options["vf_driver"]),
                heartbeat=str(options["heartbeat"]),
                dev_cfg=bool(options["dev_cfg"]),
                behind_bridge=bool(options["behind_bridge"]),
                iommu=str(options["iommu"]),
            )


# ----- kernel mode ---------------------------------------------------------------------------

KERNEL_DEFAULTS: Mapping[str, Any] = {
    "generation": "c6xx",
    "count": 1,
    "numa_node": 0,
    "state": "up",
    "config": (
        "[GENERAL]\nServicesEnabled = cy;dc\nConfigVersion = 2\n\n"
        "[KERNEL]\nNumberCyInstances = 0\nNumberDcInstances = 0\n\n"
        "[SSL]\nNumberCyInstances = 1\nNumberDcInstances = 0\nNumProcesses = 4\nLimitDevAccess = 0\n\n"
        "[DC]\nNumberCyInstances = 0\nNumberDcInstances = 1\nNumProcesses = 2\nLimitDevAccess = 1\n"
    ),
}

ADF_CTL = "/usr/local/bin/adf_ctl"
"""Where the simulated node keeps its ``adf_ctl``: put ``<root>/usr/local/bin`` first in ``PATH``."""


def _status_line(inst: int, generation: str, address: str, numa_node: int, state: str) -> str:
    return (
        f" qat_dev{inst} - type: {generation},  inst_id: {inst},  node_id: {numa_node},  "
        f"bsf: {address},  #accel: 5 #engines: 10 state: {state}"
    )


def add_kernel_device(
    tree: FakeTree, *, generation: str = "c6xx", numa_node: int = 0, state: str = "up", config: str = ""
) -> int:
    """One QAT device driven by the kernel driver: uio node, ``/etc`` configuration, ``adf_ctl`` line.

    Returns the device's ``inst_id``. The simulated ``adf_ctl`` is a script printing the status of
    every kernel-mode device created so far, as the real tool does.
    """
    pf_id = GENERATIONS[generation][0]
    lines_file = tree.path("/var/lib/sim-qat/adf_ctl_status")
    lines = lines_file.read_text().splitlines() if lines_file.exists() else []
    inst = len(lines)
    address = tree.next_pci_address()
    load_driver(tree, generation)
    tree.pci_function(
        address, vendor="0x8086", device=pf_id, numa_node=numa_node, driver=generation, pci_class=QAT_CLASS
    )
    sysfs = tree.sysfs_of(address)
    uio = f"uio{_next_index(tree, '/sys/class/uio', 'uio')}"
    tree.mkdir(f"{sysfs}/uio/{uio}")
    tree.link(f"/sys/class/uio/{uio}", f"{sysfs}/uio/{uio}")
    tree.device_node(f"/dev/{uio}")
    for node in ("/dev/qat_adf_ctl", "/dev/qat_dev_processes", "/dev/usdm_drv"):
        tree.device_node(node)
    tree.write(f"/etc/{generation}_dev{inst}.conf", config or str(KERNEL_DEFAULTS["config"]))
    lines.append(_status_line(inst, generation, address, numa_node, state))
    tree.write("/var/lib/sim-qat/adf_ctl_status", "\n".join(lines) + "\n")
    script = tree.write(ADF_CTL, adf_ctl_script(lines))
    script.chmod(0o755)
    return inst


def adf_ctl_script(status_lines: Sequence[str]) -> str:
    """A shell script printing what ``adf_ctl status`` prints for devices ``status_lines``. It holds
    the lines itself, so it runs wherever it is copied or mounted (a driver's container on a real
    node sees no simulated tree)."""
    for line in status_lines:
        if "'" in line or "\n" in line:
            raise ValueError(f"adf_ctl status line {line!r} cannot be quoted")
    shown = "".join(f"echo '{line}'\n" for line in status_lines)
    return (
        f"#!/bin/sh\necho 'There is {len(status_lines)} QAT acceleration device(s) in the system:'\n{shown}"
    )


def build_kernel(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build every ``[[qat_kernel]]`` entry: ``count`` devices for ``-mode kernel``."""
    for entry in entries:
        options = entry_options(entry, "qat_kernel", KERNEL_DEFAULTS)
        generation = _generation(options)
        for _ in range(int(options["count"])):
            add_kernel_device(
                tree,
                generation=generation,
                numa_node=int(options["numa_node"]),
                state=str(options["state"]),
                config=str(options["config"]),
            )
