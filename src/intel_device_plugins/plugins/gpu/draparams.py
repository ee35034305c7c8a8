"""``gpu.intel.com/v1alpha1`` ``GpuConfig``: per-claim parameters of the GPU DRA driver.

``byPath`` does per claim what the driver's ``-bypath`` does for every claim: which of
``/dev/dri/by-path`` the container sees (``none``; ``single``, the card's own links; ``all``, the whole
directory). Some programs find their card by PCI path and need it; a sandboxed one may want none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from intel_device_plugins.deviceplugin.model import CdiDevice, Mount
from intel_device_plugins.dra.model import AllocatedDevice, Device
from intel_device_plugins.dra.parameters import ParameterKind, api_version, parameter, parameters_of
from intel_device_plugins.plugins.gpu.discovery import NAMESPACE, ByPath


@dataclass(frozen=True)
class GpuConfig:
    by_path: str | None = parameter("byPath", choices=tuple(mode.value for mode in ByPath))


GPU_PARAMETER_KINDS = (ParameterKind(api_version(NAMESPACE), "GpuConfig", GpuConfig),)


def by_path_mounts(
    mode: ByPath, by_path_dir: str, entries: Sequence[str] | None, pci_address: str
) -> tuple[Mount, ...]:
    """The by-path mounts ``mode`` gives a card, from the directory's ``entries`` (``None``: it does not
    exist); a link whose target is gone is left out, as at discovery."""
    if mode is ByPath.NONE or entries is None:
        return ()
    if mode is ByPath.ALL:
        return (Mount(by_path_dir, by_path_dir, read_only=True),)
    if not pci_address:
        return ()
    wanted = f"pci-{pci_address}"
    paths = (os.path.join(by_path_dir, entry) for entry in sorted(entries) if entry.startswith(wanted))
    return tuple(Mount(path, path, read_only=True) for path in paths if os.path.exists(path))


def with_by_path(edit: CdiDevice, mode: ByPath, by_path_dir: str, pci_address: str) -> CdiDevice:
    """``edit`` with its by-path mounts (whatever the driver's default gave) replaced by ``mode``'s."""
    inside = by_path_dir.rstrip("/") + "/"
    kept = tuple(m for m in edit.mounts if m.host_path != by_path_dir and not m.host_path.startswith(inside))
    try:
        entries: list[str] | None = os.listdir(by_path_dir)
    except OSError:
        entries = None
    return replace(edit, mounts=kept + by_path_mounts(mode, by_path_dir, entries, pci_address))


def requested_by_path(config: Sequence[object]) -> ByPath | None:
    """The claim's ``byPath`` for one request, or ``None`` for the driver's default."""
    found = parameters_of(config, GpuConfig)
    return ByPath(found.by_path) if found is not None and found.by_path is not None else None


def claims_by_path(
    edits: Sequence[CdiDevice], allocated: Sequence[tuple[AllocatedDevice, Device]], by_path_dir: str
) -> list[CdiDevice]:
    """Each device's edits with the by-path mounts its request's ``GpuConfig`` asks for; a request
    without ``byPath`` keeps the driver's default."""
    out = []
    for edit, (result, device) in zip(edits, allocated, strict=True):
        mode = requested_by_path(result.config)
        address = str(device.attributes.get("pciAddress", ""))
        out.append(edit if mode is None else with_by_path(edit, mode, by_path_dir, address))
    return out
