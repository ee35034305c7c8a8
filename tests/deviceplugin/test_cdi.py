from __future__ import annotations

import stat
from pathlib import Path

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


def test_environment_entries_are_written_as_given() -> None:
    device = CdiDevice(kind="k8s.qat.intel.com/claim", name="u-vf", env=("QAT1=0000:3d:01.0",))
    edits = cdi_spec_document(device)["devices"][0]["containerEdits"]
    assert edits == {"env": ["QAT1=0000:3d:01.0"]}


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
