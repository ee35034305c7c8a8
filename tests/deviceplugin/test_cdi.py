from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from intel_device_plugins.deviceplugin.cdi import cdi_spec_document, cdi_spec_file_name, write_cdi_spec
from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode, Mount

DEVICE = CdiDevice(
    kind="intel.cdi.k8s.io/gpu",
    name="card0",
    nodes=(DeviceNode("/dev/dri/card0", "/dev/dri/card0", "rw"),),
    mounts=(Mount("/dev/dri/by-path/pci-0000:00:02.0-card", "/dev/dri/by-path/pci-0000:00:02.0-card"),),
)


def test_spec_document_has_the_cdi_shape() -> None:
    document = cdi_spec_document(DEVICE)
    assert document["cdiVersion"] == "0.5.0"
    assert document["kind"] == "intel.cdi.k8s.io/gpu"
    (entry,) = document["devices"]
    assert entry["name"] == "card0"
    edits = entry["containerEdits"]
    assert edits["deviceNodes"] == [
        {"path": "/dev/dri/card0", "hostPath": "/dev/dri/card0", "permissions": "rw"}
    ]
    assert edits["mounts"][0]["options"] == ["bind", "ro"] and edits["mounts"][0]["type"] == "none"


def test_hooks_are_written_for_create_runtime() -> None:
    device = CdiDevice(kind="intel.cdi.k8s.io/fpga", name="r0", create_runtime_hooks=("/opt/hook",))
    edits = cdi_spec_document(device)["devices"][0]["containerEdits"]
    assert edits == {"hooks": [{"hookName": "createRuntime", "path": "/opt/hook"}]}


def test_env_is_written_as_container_edits() -> None:
    device = CdiDevice(kind="k8s.gpu.intel.com/claim", name="u-card0", env=("A=1", "B=x=y"))
    assert cdi_spec_document(device)["devices"][0]["containerEdits"] == {"env": ["A=1", "B=x=y"]}
    assert "env" not in cdi_spec_document(DEVICE)["devices"][0]["containerEdits"]


def test_env_entry_without_a_key_is_refused() -> None:
    for bad in ("NOVALUE", "=1"):
        with pytest.raises(ValueError, match=f"u-card0: env entry '{bad}'"):
            CdiDevice(kind="k8s.gpu.intel.com/claim", name="u-card0", env=(bad,))


def test_file_name_and_mode(tmp_path: Path) -> None:
    assert cdi_spec_file_name(DEVICE) == "intel.cdi.k8s.io-gpu-card0.yaml"
    path = write_cdi_spec(tmp_path / "cdi", DEVICE)
    assert path.name == "intel.cdi.k8s.io-gpu-card0.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert yaml.safe_load(path.read_text()) == cdi_spec_document(DEVICE)


def test_unchanged_spec_is_not_rewritten(tmp_path: Path) -> None:
    path = write_cdi_spec(tmp_path, DEVICE)
    before = path.stat().st_ino
    write_cdi_spec(tmp_path, DEVICE)
    assert path.stat().st_ino == before
    changed = CdiDevice(kind=DEVICE.kind, name=DEVICE.name)
    write_cdi_spec(tmp_path, changed)
    assert yaml.safe_load(path.read_text()) == cdi_spec_document(changed)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
