"""Container Device Interface spec files.

``cdi_spec_document`` is pure; ``write_cdi_spec`` is the only function that touches the disk. Specs
are written when a device is allocated, so the container runtime can resolve the CDI name the
kubelet passes on.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from intel_device_plugins.deviceplugin.model import CdiDevice, Mount

CDI_VERSION = "0.5.0"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
VENDOR_KIND_PREFIX = "intel.cdi.k8s.io"


def _mount_entry(mount: Mount, device: CdiDevice) -> dict[str, Any]:
    return {
        "hostPath": mount.host_path,
        "containerPath": mount.container_path,
        "type": device.mount_type,
        "options": list(device.mount_options),
    }


def cdi_spec_document(device: CdiDevice) -> dict[str, Any]:
    """The CDI spec (as a YAML-ready mapping) describing exactly one device."""
    edits: dict[str, Any] = {}
    if device.nodes:
        edits["deviceNodes"] = [
            {"path": node.container_path, "hostPath": node.host_path, "permissions": node.permissions}
            for node in device.nodes
        ]
    if device.mounts:
        edits["mounts"] = [_mount_entry(mount, device) for mount in device.mounts]
    if device.create_runtime_hooks:
        edits["hooks"] = [{"hookName": "createRuntime", "path": path} for path in device.create_runtime_hooks]
    return {
        "cdiVersion": CDI_VERSION,
        "kind": device.kind,
        "devices": [{"name": device.name, "containerEdits": edits}],
    }


def cdi_spec_file_name(device: CdiDevice) -> str:
    """``intel.cdi.k8s.io/gpu`` + ``card0`` → ``intel.cdi.k8s.io-gpu-card0.yaml``."""
    return f"{device.kind.replace('/', '-')}-{device.name}.yaml"


def write_cdi_spec(cdi_dir: Path, device: CdiDevice) -> Path:
    """Write the device's spec file (mode 0644) unless an identical one is already there.

    The write is atomic (temporary file plus rename), so a runtime never reads half a spec.
    Raises ``OSError`` naming the path when the directory cannot be written.
    """
    import yaml  # only needed when a spec is written; keeps plugin start-up lean

    path = cdi_dir / cdi_spec_file_name(device)
    content = yaml.safe_dump(cdi_spec_document(device), sort_keys=False)
    try:
        if path.read_text(encoding="utf-8") == content:
            return path
    except OSError:
        pass
    cdi_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=cdi_dir, prefix=".tmp-", suffix=".yaml")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(content)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
