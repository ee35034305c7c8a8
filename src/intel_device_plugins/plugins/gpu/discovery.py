"""GPU discovery: from a filesystem root to the ``gpu.intel.com`` device tree.

A pure function of the files under ``prefix`` and the options. It never raises for one bad card:
the card is skipped (not ours, or not a DRM card) or reported Unhealthy (ours, but its device nodes
are gone), and the reason is returned as a problem line naming the card.

Nothing is guessed: a card whose SR-IOV state or driver cannot be read (a file that is not a file,
a link being re-created while the card is re-bound) is left out of that scan and reported, and a
resource name is only ever one of the drivers this plugin knows.

:func:`scan_cards` is the one scan; it returns each usable card with what both the device plugin
(:func:`scan_gpus`, the ``gpu.intel.com`` resource tree) and the DRA driver
(:mod:`intel_device_plugins.plugins.gpu.dra`) need: its PCI function's place in sysfs, device ID,
driver, NUMA node(s), SR-IOV role and, where sysfs tells it, local memory.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from enum import StrEnum

from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    Discovery,
    Health,
    Mount,
)
from intel_device_plugins.deviceplugin.topology import TopologyError, devices_root, numa_nodes_of_resolved
from intel_device_plugins.sysfs import (
    INTEL_VENDOR_ID,
    PCI_ADDRESS,
    UnreadableAttribute,
    identity,
    list_dir,
    missing,
    prefixed,
    read_attribute,
    read_first_line,
)

NAMESPACE = "gpu.intel.com"
CDI_KIND = "intel.cdi.k8s.io/gpu"
KNOWN_DRIVERS = ("i915", "xe")
"""The DRM drivers of Intel GPUs; the driver's name is the resource name."""
MONITORING_ID = "all"

CARD_NAME = re.compile(r"^card[0-9]+$")
CONTROL_NODE = re.compile(r"^controlD[0-9]+$")
TILE_DIR = re.compile(r"^tile[0-9]+$")
MAX_MEMORY_BYTES = 1 << 50
"""A local memory size above 1 PiB is garbage, not a GPU."""


class SriovRole(StrEnum):
    """A card's place in SR-IOV: a physical function that can have VFs, a VF, or neither.

    A PF with VFs enabled is a device plugin's card only through its VFs; the DRA driver publishes it
    too, as a partition overlapping them.
    """

    PF = "pf"
    VF = "vf"
    NONE = "none"


class ByPath(StrEnum):
    """How ``/dev/dri/by-path`` is made visible in the container."""

    SINGLE = "single"
    NONE = "none"
    ALL = "all"


class MonitoringMode(StrEnum):
    SINGLE = "single"
    SPLIT = "split"


@dataclass(frozen=True)
class GpuOptions:
    shared_dev_num: int = 1
    by_path: ByPath = ByPath.SINGLE
    allow_ids: frozenset[str] = frozenset()
    deny_ids: frozenset[str] = frozenset()
    enable_monitoring: bool = False
    monitoring_mode: MonitoringMode = MonitoringMode.SINGLE


@dataclass(frozen=True)
class GpuCard:
    """One usable card as a scan found it.

    ``info`` is what the device plugin serves (health, device nodes, mounts, CDI edits);
    ``health_message`` says why a card is unhealthy (empty when healthy). ``sysfs_dir`` is the PCI
    function's resolved directory, which tells its bus ID and root complex. ``device_id`` is
    ``None`` when sysfs does not tell it; ``memory_bytes`` is ``None`` for a card without local
    memory (integrated) or whose size cannot be read.
    """

    name: str
    driver: str
    info: DeviceInfo
    monitoring_nodes: tuple[DeviceNode, ...] = ()
    health_message: str = ""
    sysfs_dir: str = ""
    device_id: str | None = None
    sriov: SriovRole = SriovRole.NONE
    memory_bytes: int | None = None
    enabled_vfs: int = 0
    """VFs enabled on a PF; only scans ``with_partitioned_pfs`` return such a card."""
    pf_dir: str = ""
    """A VF's physical function (its ``sysfs_dir``)."""


@dataclass(frozen=True)
class CardScan:
    """Every usable card in card-number order, and the problems met on the way (one line each)."""

    cards: tuple[GpuCard, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class _NodeView:
    """What one scan reads once and shares between cards."""

    prefix: str
    drm_dir: str
    dri_dir: str
    dev_dir: str
    by_path_dir: str
    dri_entries: frozenset[str]
    by_path_entries: tuple[str, ...] | None
    sys_devices: str


def _node_view(prefix: str) -> _NodeView:
    dri_dir = str(prefixed(prefix, "/dev/dri"))
    by_path_dir = os.path.join(dri_dir, "by-path")
    by_path = list_dir(by_path_dir)
    return _NodeView(
        prefix=prefix,
        drm_dir=str(prefixed(prefix, "/sys/class/drm")),
        dri_dir=dri_dir,
        dev_dir=str(prefixed(prefix, "/dev")),
        by_path_dir=by_path_dir,
        dri_entries=frozenset(list_dir(dri_dir) or ()),
        by_path_entries=tuple(by_path) if by_path is not None else None,
        sys_devices=devices_root(prefix or "/"),
    )


def _pci_device_dir(view: _NodeView, name: str) -> str | None:
    """``/sys/class/drm/card0`` → ``…/devices/…/0000:00:02.0/drm/card0`` → the PCI function's directory."""
    try:
        target = os.readlink(os.path.join(view.drm_dir, name))
    except OSError:
        return None
    drm_node_dir = os.path.normpath(os.path.join(view.drm_dir, target))
    if os.path.basename(os.path.dirname(drm_node_dir)) != "drm":
        return None
    return os.path.dirname(os.path.dirname(drm_node_dir))


def _by_path_mounts(
    view: _NodeView, mode: ByPath, pci_dir: str
) -> tuple[tuple[Mount, ...], tuple[tuple[str, str], ...]]:
    """The card's by-path mounts, and the ``(link, target)`` pairs left out because the target is gone.

    A dangling link (a card re-bound under other DRM numbers before udev caught up, a node removed) would
    be a bind mount of nothing, and the runtime would fail to create the container.
    """
    if mode is ByPath.NONE or view.by_path_entries is None:
        return (), ()
    if mode is ByPath.ALL:
        return (Mount(view.by_path_dir, view.by_path_dir, read_only=True),), ()
    address = os.path.basename(pci_dir)
    if not PCI_ADDRESS.match(address):
        return (), ()
    wanted = f"pci-{address}"
    mounts: list[Mount] = []
    dangling: list[tuple[str, str]] = []
    for entry in view.by_path_entries:
        if not entry.startswith(wanted):
            continue
        path = os.path.join(view.by_path_dir, entry)
        if os.path.exists(path):
            mounts.append(Mount(path, path, read_only=True))
        else:
            dangling.append((path, _link_target(path)))
    return tuple(mounts), tuple(dangling)


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _mei_names(pci_dir: str) -> tuple[str, ...]:
    names: list[str] = []
    for entry in list_dir(pci_dir) or ():
        if ".mei-" in entry:
            names.extend(list_dir(os.path.join(pci_dir, entry, "mei")) or ())
    return tuple(names)


@dataclass(frozen=True)
class CardFacts:
    """What cannot change while a card's PCI function exists, so it is read once, not every scan."""

    vendor: str
    device_id: str | None
    drm_entries: tuple[str, ...]
    numa: tuple[int, ...]
    numa_problem: str
    mei_names: tuple[str, ...]
    resolved: str = ""
    """The PCI function's directory with every link resolved (``/sys/devices/pci…/<bdf>``)."""
    is_vf: bool = False
    sriov_capable: bool = False
    pf_dir: str = ""
    """A VF's physical function, resolved like ``resolved``; empty for anything else."""


def _sriov_capable(device_dir: str) -> bool:
    """The function can have VFs (``sriov_totalvfs`` above zero), whether or not any are enabled."""
    total = read_first_line(os.path.join(device_dir, "sriov_totalvfs"))
    return total is not None and total.isdigit() and int(total) > 0


def read_card_facts(device_dir: str, pci_dir: str, sys_devices: str) -> CardFacts | str:
    """The card's static facts, or a reason why they cannot be read (not remembered)."""
    try:
        vendor = read_attribute(os.path.join(device_dir, "vendor")).strip()
    except UnreadableAttribute as error:
        return f"cannot read {error}; card left out"
    drm_entries = list_dir(os.path.join(device_dir, "drm"))
    if drm_entries is None:
        return ""
    numa: tuple[int, ...] = ()
    numa_problem = ""
    try:
        numa = numa_nodes_of_resolved(pci_dir, sys_devices)
    except TopologyError as error:
        numa_problem = f"{error}; no NUMA topology reported"
    return CardFacts(
        vendor=vendor,
        device_id=read_first_line(os.path.join(device_dir, "device")) or None,
        drm_entries=tuple(drm_entries),
        numa=numa,
        numa_problem=numa_problem,
        mei_names=_mei_names(pci_dir),
        resolved=os.path.realpath(pci_dir),
        is_vf=os.path.islink(os.path.join(device_dir, "physfn")),
        sriov_capable=_sriov_capable(device_dir),
        pf_dir=_physical_function(device_dir),
    )


def _physical_function(device_dir: str) -> str:
    link = os.path.join(device_dir, "physfn")
    return os.path.realpath(link) if os.path.islink(link) else ""


class CardFactsCache:
    """Card facts per PCI function directory, kept while the card's function and DRM minors stay the same.

    A re-plugged card gets a new sysfs directory, so nothing stale survives it. A driver unbind and bind
    keeps the function's directory (sysfs leaves its inode and change time alone) but may bring the DRM
    minors back under other numbers. So the facts are also re-read when the function's ``drm/`` directory
    is another one (sysfs makes it anew at bind; where it is kept, adding and removing entries changes its
    change time) or when they do not name the card they are asked for.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[tuple[int, int] | None, ...], CardFacts]] = {}

    def get(self, device_dir: str, pci_dir: str, sys_devices: str, card: str = "") -> CardFacts | str:
        """Facts of the card whose ``device`` link is ``device_dir``; ``card`` (``cardN``) is its name now."""
        current = (identity(pci_dir), identity(os.path.join(device_dir, "drm")))
        known = self._known.get(pci_dir)
        if (
            known is not None
            and None not in current
            and known[0] == current
            and (not card or card in known[1].drm_entries)
        ):
            return known[1]
        facts = read_card_facts(device_dir, pci_dir, sys_devices)
        if isinstance(facts, CardFacts):
            self._known[pci_dir] = (current, facts)
        return facts


def sriov_vf_count(device_dir: str) -> int | str:
    """Enabled VFs of a card (0 when it has no SR-IOV), or why the SR-IOV state cannot be read."""
    path = os.path.join(device_dir, "sriov_numvfs")
    try:
        text = read_attribute(path).strip()
    except UnreadableAttribute as error:
        return 0 if missing(error) else f"cannot read its SR-IOV state: {error}"
    try:
        count = int(text)
    except ValueError:
        return f"cannot read its SR-IOV state: {path} holds {text[:40]!r}, not a number"
    return count if count >= 0 else f"cannot read its SR-IOV state: {path} holds {count}"


def card_driver(device_dir: str) -> str | tuple[str]:
    """The card's driver (one of :data:`KNOWN_DRIVERS`), or ``(reason,)`` why it is not used."""
    path = os.path.join(device_dir, "driver")
    try:
        target = os.readlink(path)
    except OSError as error:
        what = "has no driver link" if missing(error) else "cannot read its driver link"
        return (f"{what} {path} ({error.strerror})",)
    driver = os.path.basename(target)
    if driver not in KNOWN_DRIVERS:
        return (f"its driver link {path} names {driver!r}, not one of {', '.join(KNOWN_DRIVERS)}",)
    return driver


def _parse_memory(path: str) -> int | str | None:
    """A size in bytes from one sysfs file: ``None`` when absent, a reason when unusable."""
    try:
        text = read_attribute(path).strip()
    except UnreadableAttribute as error:
        return None if missing(error) else f"cannot read {error}"
    try:
        value = int(text, 0)
    except ValueError:
        return f"{path} holds {text[:40]!r}, not a size in bytes"
    if not 0 <= value <= MAX_MEMORY_BYTES:
        return f"{path} holds {value}, not a plausible size in bytes"
    return value


def card_memory(card_dir: str, pci_dir: str, driver: str) -> int | str | None:
    """The card's local memory in bytes, as its driver tells it; ``None`` when it has none.

    i915 has ``card<N>/lmem_total_bytes`` for the whole card. xe has
    ``<pci function>/tile<T>/physical_vram_size_bytes`` per tile; the card's memory is their sum.
    A file that exists but cannot be used is a reason (``str``), never a guess.
    """
    if driver == "i915":
        size = _parse_memory(os.path.join(card_dir, "lmem_total_bytes"))
        return size if isinstance(size, str) else (size or None)
    total = 0
    for entry in list_dir(pci_dir) or ():
        if not TILE_DIR.match(entry):
            continue
        size = _parse_memory(os.path.join(pci_dir, entry, "physical_vram_size_bytes"))
        if isinstance(size, str):
            return size
        total += size or 0
    return total or None


def _sriov_role(facts: CardFacts) -> SriovRole:
    if facts.is_vf:
        return SriovRole.VF
    return SriovRole.PF if facts.sriov_capable else SriovRole.NONE


def _inspect_card(
    view: _NodeView,
    name: str,
    options: GpuOptions,
    cache: CardFactsCache,
    problems: list[str],
    with_memory: bool,
    with_partitioned_pfs: bool = False,
) -> GpuCard | None:
    device_dir = os.path.join(view.drm_dir, name, "device")
    pci_dir = _pci_device_dir(view, name) or os.path.realpath(device_dir)
    facts = cache.get(device_dir, pci_dir, view.sys_devices, name)
    if isinstance(facts, str):
        if facts:
            problems.append(f"GPU {name}: {facts}")
        return None
    if facts.vendor != INTEL_VENDOR_ID:
        return None
    if options.allow_ids or options.deny_ids:
        if not facts.device_id:
            problems.append(
                f"GPU {name}: cannot read its PCI device ID; skipped because allow/deny lists are set"
            )
            return None
        if options.allow_ids and facts.device_id not in options.allow_ids:
            return None
        if facts.device_id in options.deny_ids:
            return None
    vfs = sriov_vf_count(device_dir)
    if isinstance(vfs, str):
        # Guessing "no VFs" could hand out the PF next to its VFs: the same GPU to two pods.
        problems.append(f"GPU {name}: {vfs}; left out of this scan")
        return None
    if vfs > 0 and not with_partitioned_pfs:
        return None
    driver = card_driver(device_dir)
    if isinstance(driver, tuple):
        problems.append(f"GPU {name}: {driver[0]}; left out of this scan")
        return None
    expected = [entry for entry in facts.drm_entries if not CONTROL_NODE.match(entry)]
    present = [entry for entry in expected if entry in view.dri_entries]
    paths = [os.path.join(view.dri_dir, entry) for entry in present]
    nodes = tuple(DeviceNode(path, path, "rw") for path in paths)
    health = Health.HEALTHY
    health_message = ""
    if not present:
        if not expected:
            return None
        health_message = f"none of its device nodes {expected} exist in {view.dri_dir}"
    elif len(present) < len(expected):
        missing_nodes = sorted(set(expected) - set(present))
        health_message = f"device nodes {missing_nodes} missing in {view.dri_dir}"
    if health_message:
        problems.append(f"GPU {name}: {health_message}; reported Unhealthy")
        health = Health.UNHEALTHY

    if facts.numa_problem:
        problems.append(f"GPU {name}: {facts.numa_problem}")
    memory = card_memory(os.path.join(view.drm_dir, name), pci_dir, driver) if with_memory else None
    if isinstance(memory, str):
        problems.append(f"GPU {name}: {memory}; no memory size reported")
        memory = None
    mounts, dangling = _by_path_mounts(view, options.by_path, pci_dir)
    for link, target in dangling:
        if os.path.basename(target) not in expected:  # a missing node of the card is reported above
            problems.append(
                f"GPU {name}: by-path link {link} points to {target!r}, which does not exist; not mounted"
            )
    info = DeviceInfo(
        health=health,
        nodes=nodes,
        mounts=mounts,
        numa_nodes=facts.numa,
        cdi=CdiDevice(kind=CDI_KIND, name=name, nodes=nodes, mounts=mounts) if nodes else None,
    )
    monitoring: tuple[DeviceNode, ...] = ()
    if options.enable_monitoring:
        mei = (os.path.join(view.dev_dir, mei_name) for mei_name in facts.mei_names)
        monitoring = nodes + tuple(DeviceNode(path, path, "rw") for path in mei)
    return GpuCard(
        name=name,
        driver=driver,
        info=info,
        monitoring_nodes=monitoring,
        health_message=health_message,
        sysfs_dir=facts.resolved,
        device_id=facts.device_id,
        sriov=_sriov_role(facts),
        memory_bytes=memory,
        enabled_vfs=vfs,
        pf_dir=facts.pf_dir,
    )


def _card_number(name: str) -> int:
    return int(name[4:])


def scan_cards(
    prefix: str,
    options: GpuOptions,
    cache: CardFactsCache | None = None,
    *,
    with_memory: bool = False,
    with_partitioned_pfs: bool = False,
) -> CardScan | str:
    """Every usable Intel GPU of the node under ``prefix``, or why the cards cannot be listed.

    ``cache`` carries the cards' static facts from one scan to the next; without it every fact
    is read afresh. Either way the result is the same. Local memory is read only ``with_memory``
    (the device plugin has no use for it, so its scans neither read nor report it).
    ``with_partitioned_pfs`` also returns PFs with VFs enabled (``enabled_vfs``): the DRA driver
    publishes them beside their VFs as overlapping partitions, the device plugin never serves them.
    """
    problems: list[str] = []
    view = _node_view(prefix)
    cache = cache if cache is not None else CardFactsCache()
    entries = list_dir(view.drm_dir)
    if entries is None:
        return f"cannot read {view.drm_dir}"
    cards: list[GpuCard] = []
    for name in sorted((e for e in entries if CARD_NAME.match(e)), key=_card_number):
        card = _inspect_card(view, name, options, cache, problems, with_memory, with_partitioned_pfs)
        if card is not None:
            cards.append(card)
    return CardScan(tuple(cards), tuple(problems))


def scan_gpus(prefix: str, options: GpuOptions, cache: CardFactsCache | None = None) -> Discovery:
    """The complete GPU device tree of the node under ``prefix``, with the problems found."""
    scan = scan_cards(prefix, options, cache)
    if isinstance(scan, str):
        return Discovery({}, (f"{scan}; no GPUs advertised",))
    tree: dict[str, dict[str, DeviceInfo]] = {}
    monitoring: dict[str, list[DeviceNode]] = {}
    for card in scan.cards:
        devices = tree.setdefault(card.driver, {})
        for index in range(options.shared_dev_num):
            devices[f"{card.name}-{index}"] = card.info
        if options.enable_monitoring:
            resource = (
                "monitoring"
                if options.monitoring_mode is MonitoringMode.SINGLE
                else f"{card.driver}_monitoring"
            )
            monitoring.setdefault(resource, []).extend(card.monitoring_nodes)
    for resource, nodes in monitoring.items():
        tree[resource] = {MONITORING_ID: DeviceInfo(health=Health.HEALTHY, nodes=tuple(nodes))}
    return Discovery(tree, scan.problems)


PCI_DEVICE_ID = re.compile(r"^0x[0-9a-f]{4}$")


def parse_id_list(text: str) -> frozenset[str]:
    """``"0x56c0, 0x56c1"`` → IDs; each must be lowercase ``0x`` plus four hex digits."""
    if text == "":
        return frozenset()
    ids: set[str] = set()
    for item in text.split(","):
        item = item.strip()
        if not PCI_DEVICE_ID.match(item):
            raise argparse.ArgumentTypeError(f"invalid PCI device ID {item!r} (expected e.g. 0x56c0)")
        ids.add(item)
    return frozenset(ids)
