"""``GpuConfig`` per claim: ``byPath`` overrides the driver's ``-bypath`` for the requests it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.claims import ClaimError, allocated_devices
from intel_device_plugins.dra.model import ClaimRef
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions
from intel_device_plugins.plugins.gpu.dra import GpuDriverProfile
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree

UID = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
REF = ClaimRef("ns", "claim", UID)
DRIVER = "gpu.intel.com"


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.mkdir("/sys/class/drm")
    fake.mkdir("/dev/dri/by-path")
    fake.write_numa_nodes()
    return fake


def claim(device: str, *parameters: dict[str, object]) -> dict[str, object]:
    config = [
        {"source": "FromClass" if i == 0 else "FromClaim", "opaque": {"driver": DRIVER, "parameters": p}}
        for i, p in enumerate(parameters)
    ]
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": device}
    return {
        "metadata": {"uid": UID},
        "status": {"allocation": {"devices": {"results": [result], "config": config}}},
    }


def gpu_config(**fields: object) -> dict[str, object]:
    return {"apiVersion": "gpu.intel.com/v1alpha1", "kind": "GpuConfig", **fields}


def mounts_of(profile: GpuDriverProfile, tree: FakeTree, *parameters: dict[str, object]) -> list[str]:
    """The host paths of the by-path mounts the first card gets for a claim with ``parameters``."""
    device = sorted(profile.scan().devices, key=lambda d: d.name)[0]
    (result,) = allocated_devices(
        claim(device.name, *parameters), REF, DRIVER, "node-a", profile.parameter_kinds
    )
    (edit,) = profile.claim_edits(UID, [(result, device)])
    by_path = str(tree.path("/dev/dri/by-path"))
    return sorted(m.host_path.removeprefix(by_path) for m in edit.mounts)


@pytest.mark.parametrize(
    ("default", "parameters", "expected"),
    [
        (ByPath.SINGLE, (), ["/pci-{a}-card", "/pci-{a}-render"]),
        (ByPath.SINGLE, (gpu_config(byPath="none"),), []),
        (ByPath.SINGLE, (gpu_config(byPath="all"),), [""]),
        (ByPath.NONE, (gpu_config(byPath="single"),), ["/pci-{a}-card", "/pci-{a}-render"]),
        (
            ByPath.ALL,
            (gpu_config(byPath="none"), gpu_config(byPath="single")),
            ["/pci-{a}-card", "/pci-{a}-render"],
        ),
        (ByPath.NONE, (gpu_config(byPath="all"), gpu_config()), [""]),
    ],
)
def test_by_path_of_the_claim_overrides_the_drivers_default_class_first(
    tree: FakeTree, default: ByPath, parameters: tuple[dict[str, object], ...], expected: list[str]
) -> None:
    first = gpu.add_card(tree)
    gpu.add_card(tree)  # its links must never reach the first card's container in single mode
    profile = GpuDriverProfile(prefix=str(tree.root), options=GpuOptions(by_path=default))
    assert mounts_of(profile, tree, *parameters) == [e.format(a=first.address) for e in expected]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (gpu_config(byPath="some"), r"parameters.byPath: 'some' is not one of single, none, all"),
        (gpu_config(bypath="none"), r"parameters.bypath: unknown field of GpuConfig"),
        (gpu_config(byPath=True), r"parameters.byPath: must be a string, not bool"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"},
            r"parameters: apiVersion .* not known",
        ),
        ({"byPath": "none"}, r"parameters: apiVersion and kind are missing"),
    ],
)
def test_gpu_parameters_the_driver_does_not_honour_fail_the_claim_naming_the_field(
    tree: FakeTree, parameters: dict[str, object], message: str
) -> None:
    gpu.add_card(tree)
    profile = GpuDriverProfile(prefix=str(tree.root))
    with pytest.raises(
        ClaimError, match=r"ResourceClaim ns/claim: request gpu: .*config\[0\]\.opaque\." + message
    ):
        mounts_of(profile, tree, parameters)
