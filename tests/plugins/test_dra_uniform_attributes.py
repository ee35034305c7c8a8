"""Every device a driver publishes carries the same attribute and capacity names, with the same types.

Kubernetes aborts a whole allocation when a CEL selector reads an attribute one candidate device
lacks, so a driver whose devices differ in what they carry turns a selector that suits most of them
into an allocation failure on any node where one device is different. Each kind's driver scans every
bundled simulated node and hand-made nodes that mix what a kind can mix (roles, services, queue modes,
NUMA placement, unreadable settings); the standard ``resource.kubernetes.io/*`` attributes are
exempt (``dra.uniform`` says why).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from intel_device_plugins.dra.model import Device, Version
from intel_device_plugins.dra.profile import DriverProfile
from intel_device_plugins.plugins.dlb import dracli as dlb
from intel_device_plugins.plugins.dsa import dracli as dsa
from intel_device_plugins.plugins.fpga import dracli as fpga
from intel_device_plugins.plugins.iaa import dracli as iaa
from intel_device_plugins.plugins.npu import dracli as npu
from intel_device_plugins.plugins.qat import dracli as qat
from intel_device_plugins.plugins.sgx import dracli as sgx
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.qat import ADF_CTL
from tests.builders import two_socket_node

STANDARD_DOMAIN = "resource.kubernetes.io/"

# Driver variant -> its command-line module and the flags choosing the variant.
DRIVERS: dict[str, tuple[ModuleType, tuple[str, ...]]] = {
    "dsa": (dsa, ()),
    "iaa": (iaa, ()),
    "dlb": (dlb, ()),
    "npu": (npu, ()),
    "sgx": (sgx, ()),
    "qat": (qat, ()),
    "qat-kernel": (qat, ("-mode", "kernel")),
    "fpga-af": (fpga, ("-mode", "af")),
    "fpga-region": (fpga, ("-mode", "region")),
}

PROFILES = sorted(
    name.removesuffix(".toml")
    for name in os.listdir(Path(__file__).parents[2] / "src/intel_device_plugins/sim/profiles")
    if name.endswith(".toml")
)

MIXED_NODES: dict[str, str] = {
    "dsa": "[[dsa]]\ncount = 2\nwqs = 3\nwq_mode = 'mixed'\nnuma_node = 1\n"
    "[[dsa]]\nwqs = 1\nnuma_node = -1\n",
    "iaa": "[[iaa]]\nwqs = 2\nwq_mode = 'mixed'\n[[iaa]]\nwqs = 1\nnuma_node = -1\n",
    "dlb": "[[dlb]]\n[[dlb]]\nvfs = 2\nnuma_node = 1\n[[dlb]]\nnuma_node = -1\n",
    "npu": "[[npu]]\nnuma_node = 1\n[[npu]]\nnuma_node = -1\n",
    "sgx": "[[sgx]]\nepc_bytes_per_node = 1073741824\n",
    "qat": "[[qat]]\nvfs = 2\nservices = 'sym;asym'\n[[qat]]\nvfs = 1\nservices = 'dc'\nnuma_node = -1\n",
    "fpga-af": "[[fpga]]\ncount = 2\nports = 2\n[[fpga]]\nnuma_node = -1\n",
    "fpga-region": "[[fpga]]\ncount = 2\nports = 2\n[[fpga]]\nnuma_node = -1\n",
}


def value_type(value: object) -> str:
    """The attribute's API type (``bool`` before ``int``: ``True`` is an ``int`` in Python)."""
    for kind, name in ((bool, "bool"), (int, "int"), (str, "string"), (Version, "version")):
        if isinstance(value, kind):
            return name
    raise AssertionError(f"{value!r} is no attribute type")


def shape(device: Device) -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    attributes = frozenset(
        (name, value_type(value))
        for name, value in device.attributes.items()
        if not name.startswith(STANDARD_DOMAIN)
    )
    return attributes, frozenset(device.capacity)


def scan(driver: str, root: Path) -> Sequence[Device]:
    module, flags = DRIVERS[driver]
    profile: DriverProfile = module.build_profile(
        module.build_parser().parse_args([*flags, f"-prefix={root}"])
    )
    return profile.scan().devices


def assert_uniform(driver: str, devices: Sequence[Device]) -> None:
    shapes = {device.name: shape(device) for device in devices}
    first_name, first = next(iter(shapes.items()))
    for name, other in shapes.items():
        assert other == first, (
            f"{driver}: {name} and {first_name} differ: "
            f"{sorted(other[0] ^ first[0])} {sorted(other[1] ^ first[1])}"
        )


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("driver", sorted(set(DRIVERS) - {"qat-kernel"}))
def test_every_device_of_a_driver_on_a_bundled_node_has_the_same_attributes(
    driver: str, profile: str, tmp_path: Path
) -> None:
    build_node(parse_node_spec(profile_text(profile), profile), tmp_path)
    devices = scan(driver, tmp_path)
    if len(devices) < 2:
        return  # nothing to compare on this node; the mixed nodes below cover every driver
    assert_uniform(driver, devices)


@pytest.mark.parametrize("driver", sorted(MIXED_NODES))
def test_every_device_of_a_driver_on_a_mixed_node_has_the_same_attributes(
    driver: str, tmp_path: Path
) -> None:
    two_socket_node(tmp_path, MIXED_NODES[driver])
    devices = scan(driver, tmp_path)
    assert len(devices) >= 2, f"{driver}: the mixed node gives too few devices to compare"
    assert_uniform(driver, devices)


def test_qat_kernel_mode_slots_have_the_same_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_node(parse_node_spec(profile_text("qat-kernel"), "qat-kernel"), tmp_path)
    monkeypatch.setenv("PATH", f"{tree.path(ADF_CTL).parent}{os.pathsep}{os.environ['PATH']}")
    devices = scan("qat-kernel", tmp_path)
    assert len({device.attributes["resource"] for device in devices}) == 2, "both section shapes"
    assert_uniform("qat-kernel", devices)


def test_a_queue_whose_settings_cannot_be_read_has_them_all_the_same(tmp_path: Path) -> None:
    two_socket_node(tmp_path, "[[dsa]]\nwqs = 2\n")
    (tmp_path / "sys/bus/dsa/devices/dsa0/wq0.1/priority").unlink()
    devices = scan("dsa", tmp_path)
    assert {device.attributes["priority"] for device in devices} == {10, 0}
    assert_uniform("dsa", devices)


def test_the_check_sees_a_missing_attribute() -> None:
    """The comparison itself can fail: a device lacking one attribute is reported by name."""
    with pytest.raises(AssertionError, match="b and a differ"):
        assert_uniform("x", [Device("a", {"model": "m", "numaNode": 0}), Device("b", {"model": "m"})])
    with pytest.raises(AssertionError, match="numaNode"):
        assert_uniform("x", [Device("a", {"numaNode": 0}), Device("b", {"numaNode": "0"})])
