"""Hardware faults on a simulated node, as the kernel shows them (``deviceplugin/health/kernel.py``
reads them): PCIe AER counters that rise, a driver unbound, a GPU wedged or with an error state, a
QAT function down or with a dead heartbeat, a DSA/IAA device halted. Each change is written the way
sysfs holds it and announced with the uevent the kernel sends, where it sends one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from intel_device_plugins.sim.fakefs import FakeTree

AER_NAMES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "correctable": (
            "Receiver Error",
            "Bad TLP",
            "Bad DLLP",
            "RELAY_NUM Rollover",
            "Replay Timer Timeout",
            "Advisory Non-Fatal",
            "Corrected Internal Error",
            "Header Log Overflow",
        ),
        "fatal": (
            "Undefined",
            "Data Link Protocol",
            "Surprise Down Error",
            "Poisoned TLP",
            "Flow Control Protocol",
            "Completion Timeout",
            "Completer Abort",
            "Unexpected Completion",
            "Receiver Overflow",
            "Malformed TLP",
            "ECRC",
            "Unsupported Request",
            "ACS Violation",
            "Uncorrectable Internal Error",
            "MC Blocked TLP",
            "AtomicOp Egress Blocked",
            "TLP Prefix Blocked Error",
        ),
    }
)
"""Error names per AER file as the ABI document lists them (with spaces: the count is the last token);
``nonfatal`` has ``fatal``'s names."""
AER_TOTALS: Final = MappingProxyType(
    {"fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL", "correctable": "TOTAL_ERR_COR"}
)


def _aer_names(kind: str) -> tuple[str, ...]:
    return AER_NAMES["fatal" if kind == "nonfatal" else kind]


def _aer_path(tree: FakeTree, bdf: str, kind: str) -> str:
    return f"/sys/bus/pci/devices/{bdf}/aer_dev_{kind}"


def read_aer_file(tree: FakeTree, bdf: str, kind: str) -> dict[str, int]:
    path = tree.path(_aer_path(tree, bdf, kind))
    counts = dict.fromkeys(_aer_names(kind), 0)
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, count = line.rpartition(" ")
            if name in counts:
                counts[name] = int(count)
    return counts


def write_aer(tree: FakeTree, bdf: str, kind: str, counts: Mapping[str, int]) -> None:
    """One AER file in the kernel's format: ``<name> <count>`` per error, then the total."""
    lines = [f"{name} {counts.get(name, 0)}" for name in _aer_names(kind)]
    lines.append(f"{AER_TOTALS[kind]} {sum(counts.get(name, 0) for name in _aer_names(kind))}")
    tree.write(_aer_path(tree, bdf, kind), "\n".join(lines) + "\n")


def enable_aer(tree: FakeTree, bdf: str) -> None:
    """The three AER files of an AER-capable device, all counters zero."""
    for kind in AER_TOTALS:
        write_aer(tree, bdf, kind, {})


def raise_aer(tree: FakeTree, bdf: str, kind: str, name: str | None = None, by: int = 1) -> None:
    """``by`` more errors of ``kind`` (``fatal``, ``nonfatal``, ``correctable``), counted as ``name``
    (the kind's first error name by default). The kernel sends no uevent for a count."""
    if kind not in AER_TOTALS:
        raise ValueError(f"AER kind {kind!r} is none of {', '.join(AER_TOTALS)}")
    counts = read_aer_file(tree, bdf, kind)
    error = name or _aer_names(kind)[1]
    if error not in counts:
        raise ValueError(f"AER {kind} has no error named {error!r}")
    counts[error] += by
    write_aer(tree, bdf, kind, counts)


def unbind(tree: FakeTree, bdf: str) -> str:
    """Unbind the device's driver (as writing to ``driver/unbind`` does); returns the driver's name."""
    sysfs = tree.sysfs_of(bdf)
    link = tree.path(f"{sysfs}/driver")
    if not link.is_symlink():
        return ""
    driver = link.resolve().name
    tree.remove(f"{sysfs}/driver")
    tree.remove(f"/sys/bus/pci/drivers/{driver}/{bdf}")
    tree.uevent("unbind", sysfs, "pci", PCI_SLOT_NAME=bdf)
    return driver


def bind(tree: FakeTree, bdf: str, driver: str) -> None:
    sysfs = tree.sysfs_of(bdf)
    tree.bind(bdf, sysfs, driver)
    tree.uevent("bind", sysfs, "pci", DRIVER=driver, PCI_SLOT_NAME=bdf)


def wedge(tree: FakeTree, card: int, methods: str = "rebind", task: str = "") -> None:
    """The DRM card declares itself wedged: a ``change`` uevent with ``WEDGED=<methods>`` (and
    ``PID``/``TASK`` when a process is to blame)."""
    sysfs = tree.sysfs_of(_card_address(tree, card)) + f"/drm/card{card}"
    extra = {"PID": "4242", "TASK": task} if task else {}
    tree.uevent("change", sysfs, "drm", WEDGED=methods, **extra)


def i915_error_state(tree: FakeTree, card: int, captured: bool = True) -> None:
    """i915's ``cardN/error``: a captured dump, or the text of an empty one."""
    content = (
        "GPU HANG: ecode 12:1:85dffffb, in simulated [4242]\n" if captured else "No error state collected\n"
    )
    tree.write(f"/sys/class/drm/card{card}/error", content)
    if captured:
        sysfs = tree.sysfs_of(_card_address(tree, card)) + f"/drm/card{card}"
        tree.uevent("change", sysfs, "drm", ERROR="1")


def pci_error_recovery(tree: FakeTree, bdf: str, result: str) -> None:
    """A PCI error-recovery uevent: ``BEGIN_RECOVERY``, ``SUCCESSFUL_RECOVERY`` or ``FAILED_RECOVERY``."""
    online = "1" if result == "SUCCESSFUL_RECOVERY" else "0"
    tree.uevent("change", tree.sysfs_of(bdf), "pci", ERROR_EVENT=result, DEVICE_ONLINE=online)


def _card_address(tree: FakeTree, card: int) -> str:
    return tree.path(f"/sys/class/drm/card{card}/device").resolve().name


def qat_state(tree: FakeTree, bdf: str, state: str) -> None:
    """A QAT PF's ``qat/state`` (``up``/``down``); the kernel sends no uevent for it."""
    tree.write(f"/sys/bus/pci/devices/{bdf}/qat/state", f"{state}\n")


def qat_heartbeat(tree: FakeTree, bdf: str, status: str, driver: str | None = None) -> None:
    """A QAT PF's debugfs ``heartbeat/status``: ``0`` alive, ``-1`` unresponsive."""
    name = driver or tree.path(f"/sys/bus/pci/devices/{bdf}/driver").resolve().name
    tree.write(f"/sys/kernel/debug/qat_{name}_{bdf}/heartbeat/status", f"{status}\n")


def idxd_state(tree: FakeTree, name: str, state: str) -> None:
    """A DSA/IAA device's or work queue's ``state`` (``enabled``, ``disabled``, ``halted``)."""
    tree.write(f"/sys/bus/dsa/devices/{name}/state", f"{state}\n")


def idxd_errors(tree: FakeTree, name: str, words: tuple[int, int, int, int] = (0, 0, 0, 0)) -> None:
    """A DSA/IAA device's ``errors`` register as newer kernels print it (a bitmap of 32-bit groups)."""
    groups = [f"{(word >> shift) & 0xFFFFFFFF:08x}" for word in reversed(words) for shift in (32, 0)]
    tree.write(f"/sys/bus/dsa/devices/{name}/errors", ",".join(groups) + "\n")
