"""Container Device Interface spec files.

``cdi_spec_document`` is pure; ``write_cdi_spec`` is the only function that touches the disk. Specs
are written when a device is allocated, so the container runtime can resolve the CDI name the
kubelet passes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from intel_device_plugins.deviceplugin.model import CdiDevice, Mount

CDI_VERSION = "0.5.0"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
VENDOR_KIND_PREFIX = "intel.cdi.k8s.io"

TEMPORARY_SUFFIX = ".tmp"
"""CDI consumers load every ``*.yaml`` and ``*.json`` in the directory, hidden files included; a
file being written must end in neither."""
STALE_TEMPORARY_SECONDS = 60.0
"""A temporary file this old was left by a process killed mid-write (writing one takes milliseconds)."""
_OUR_TEMPORARY = re.compile(r"^\..+\.yaml\.[0-9a-f]+\.tmp$")
_OLD_TEMPORARY = re.compile(r"^\.tmp-.+\.yaml$")
"""What earlier versions wrote, which CDI consumers took for a (broken) spec."""

log = logging.getLogger(__name__)


class CdiWriteError(OSError):
    """A spec that cannot be written; ``str()`` names the file, the errno and its meaning."""

    def __init__(self, path: Path, error: OSError) -> None:
        code = error.errno or 0
        super().__init__(code, error.strerror or str(error), os.fspath(path))
        self.path = path

    def __str__(self) -> str:
        name = os.strerror(self.errno) if self.errno else self.strerror
        return f"cannot write CDI spec {self.path}: errno {self.errno} ({name})"


def _mount_entry(mount: Mount, device: CdiDevice) -> dict[str, Any]:
    return {
        "hostPath": mount.host_path,
        "containerPath": mount.container_path,
        "type": device.mount_type,
        "options": list(device.mount_options),
    }


def cdi_spec_document(device: CdiDevice) -> dict[str, Any]:
    """The CDI spec (as a YAML-ready mapping) describing exactly one device."""
    return cdi_spec_document_for((device,))


def cdi_spec_document_for(devices: Sequence[CdiDevice]) -> dict[str, Any]:
    """One CDI spec describing several devices of one kind (a DRA claim's devices share a spec)."""
    if not devices:
        raise ValueError("a CDI spec needs at least one device")
    kinds = {device.kind for device in devices}
    if len(kinds) != 1:
        raise ValueError(f"one CDI spec holds one kind, got {sorted(kinds)}")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": devices[0].kind,
        "devices": [{"name": device.name, "containerEdits": _edits(device)} for device in devices],
    }


def _edits(device: CdiDevice) -> dict[str, Any]:
    edits: dict[str, Any] = {}
    if device.nodes:
        edits["deviceNodes"] = [
            {"path": node.container_path, "hostPath": node.host_path, "permissions": node.permissions}
            for node in device.nodes
        ]
    if device.mounts:
        edits["mounts"] = [_mount_entry(mount, device) for mount in device.mounts]
    if device.env:
        edits["env"] = list(device.env)
    if device.create_runtime_hooks:
        edits["hooks"] = [{"hookName": "createRuntime", "path": path} for path in device.create_runtime_hooks]
    return edits


def cdi_spec_file_name(device: CdiDevice) -> str:
    """``intel.cdi.k8s.io/gpu`` + ``card0`` → ``intel.cdi.k8s.io-gpu-card0.yaml``."""
    return f"{device.kind.replace('/', '-')}-{device.name}.yaml"


def write_cdi_spec(cdi_dir: Path, device: CdiDevice) -> Path:
    """Write the device's spec file (mode 0644) unless an identical one is already there.

    The write is atomic (a temporary ``.<name>.<random>.tmp``, which CDI consumers ignore, then a
    rename), so a runtime never reads half a spec. Raises :class:`CdiWriteError` naming the file and
    the errno when it cannot be written (directory missing and not creatable, a file in its place,
    disk full, read-only).
    """
    return write_cdi_document(cdi_dir, cdi_spec_file_name(device), cdi_spec_document(device))


def write_cdi_document(cdi_dir: Path, file_name: str, document: dict[str, Any]) -> Path:
    """Write ``document`` as ``cdi_dir/file_name`` as :func:`write_cdi_spec` does (atomic, 0644, no
    rewrite when identical). ``file_name`` must be a plain ``*.json`` or ``*.yaml`` name, which says
    the format (CDI readers take both): it never leaves ``cdi_dir``. JSON costs a fifteenth of YAML to
    render, which matters on a path every container start waits for."""
    if "/" in file_name or file_name.startswith(".") or not file_name.endswith((".json", ".yaml")):
        raise ValueError(f"CDI spec file name {file_name!r} is not a plain *.json or *.yaml name")
    path = cdi_dir / file_name
    if file_name.endswith(".json"):
        content = json.dumps(document, separators=(",", ":")).encode("utf-8")
    else:
        import yaml  # only needed when a spec is written; keeps plugin start-up lean

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml is ten times faster when present
        content = yaml.dump(document, Dumper=dumper, sort_keys=False).encode("utf-8")
    try:
        if path.read_bytes() == content:
            return path
    except OSError:
        pass
    temporary = cdi_dir / f".{path.name}.{os.urandom(4).hex()}{TEMPORARY_SUFFIX}"
    try:
        cdi_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            written = 0
            while written < len(content):
                written += os.write(fd, content[written:])
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise CdiWriteError(path, error) from error
        raise
    return path


def remove_stale_cdi_temporaries(cdi_dir: Path, older_than: float = STALE_TEMPORARY_SECONDS) -> list[Path]:
    """Remove temporary files left by writers killed mid-write; the removed paths.

    Only names this module writes (and wrote in earlier versions) are touched, and only when older than
    ``older_than`` seconds, so a write in progress in another plugin process sharing the directory is
    left alone.
    """
    removed: list[Path] = []
    try:
        names = os.listdir(cdi_dir)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        if not (_OUR_TEMPORARY.match(name) or _OLD_TEMPORARY.match(name)):
            continue
        path = cdi_dir / name
        try:
            if now - path.lstat().st_mtime < older_than:
                continue
            path.unlink()
        except OSError as error:
            log.warning("cannot remove stale temporary CDI file %s: %s", path, error)
            continue
        removed.append(path)
    if removed:
        log.info("removed %d stale temporary file(s) from %s", len(removed), cdi_dir)
    return removed
