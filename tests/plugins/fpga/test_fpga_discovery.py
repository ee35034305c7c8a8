"""FPGA discovery on simulated nodes: both drivers, every mode, and broken trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.plugins.fpga.discovery import (
    CDI_KIND,
    CRI_HOOK_PATH,
    Driver,
    Mode,
    af_resource_name,
    discover_fpgas,
    scan_fpga,
)
from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree

NLB0_AF = "af-ce4.d84.zkiWk5jwXzOUbVYHCL4QithCTcSko8QT-J5DNoP5BAs"
"""Upstream's resource name for the Arria 10 interface with the NLB0 AFU."""
REGION = f"region-{fpga.ARRIA10_INTERFACE}"
DRIVERS = (fpga.DFL, fpga.OPAE)


def _port(driver: str, index: int) -> str:
    return f"dfl-port.{index}" if driver == fpga.DFL else f"intel-fpga-port.{index}"


def _fme(driver: str, index: int) -> str:
    return f"dfl-fme.{index}" if driver == fpga.DFL else f"intel-fpga-fme.{index}"


def test_af_resource_name_matches_upstream() -> None:
    assert af_resource_name(fpga.ARRIA10_INTERFACE, fpga.NLB0_AFU) == NLB0_AF
    assert len(NLB0_AF) == 54
    with pytest.raises(ValueError, match="not hexadecimal"):
        af_resource_name("zz" * 16, fpga.NLB0_AFU)


@pytest.mark.parametrize("driver", DRIVERS)
def test_af_mode_one_device_per_port(tmp_path: Path, driver: str) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    fpga.add_fpga(tree, driver=driver, ports=2, numa_node=1)
    fpga.add_fpga(tree, driver=driver, afu_id=fpga.NLB3_AFU)
    scan = scan_fpga(tmp_path, Mode.AF)
    assert scan.problems == ()
    nlb3 = af_resource_name(fpga.ARRIA10_INTERFACE, fpga.NLB3_AFU)
    assert sorted(scan.tree) == sorted([NLB0_AF, nlb3])
    assert sorted(scan.tree[NLB0_AF]) == [_port(driver, 0), _port(driver, 1)]
    info = scan.tree[NLB0_AF][_port(driver, 1)]
    node = f"{tmp_path}/dev/{_port(driver, 1)}"
    assert [(n.host_path, n.container_path, n.permissions) for n in info.nodes] == [(node, node, "rw")]
    assert info.numa_nodes == (1,)
    assert info.health is Health.HEALTHY
    assert info.cdi is None and not info.annotations
    assert list(scan.tree[nlb3]) == [_port(driver, 2)]


@pytest.mark.parametrize("driver", DRIVERS)
def test_region_mode_one_device_per_fme_with_hook(tmp_path: Path, driver: str) -> None:
    tree = FakeTree(tmp_path)
    fpga.add_fpga(tree, driver=driver, ports=2)
    fpga.add_fpga(tree, driver=driver, interface_id="bfac4d851ee856fe8c95865ce1bbaa2d")
    scan = scan_fpga(tmp_path, Mode.REGION)
    assert scan.problems == ()
    assert sorted(scan.tree) == sorted([REGION, "region-bfac4d851ee856fe8c95865ce1bbaa2d"])
    info = scan.tree[REGION][_fme(driver, 0)]
    assert [n.host_path for n in info.nodes] == [f"{tmp_path}/dev/{_port(driver, i)}" for i in (0, 1)]
    assert dict(info.annotations) == {"com.intel.fpga.mode": "fpga.intel.com/region"}
    assert info.cdi is not None
    assert (info.cdi.kind, info.cdi.name, info.cdi.create_runtime_hooks) == (
        CDI_KIND,
        _fme(driver, 0),
        (CRI_HOOK_PATH,),
    )
    assert list(scan.tree["region-bfac4d851ee856fe8c95865ce1bbaa2d"]) == [_fme(driver, 1)]


@pytest.mark.parametrize("driver", DRIVERS)
def test_regiondevel_adds_the_fme_node_and_no_hook(tmp_path: Path, driver: str) -> None:
    fpga.add_fpga(FakeTree(tmp_path), driver=driver)
    info = scan_fpga(tmp_path, Mode.REGIONDEVEL).tree[REGION][_fme(driver, 0)]
    assert [n.host_path for n in info.nodes] == [
        f"{tmp_path}/dev/{_port(driver, 0)}",
        f"{tmp_path}/dev/{_fme(driver, 0)}",
    ]
    assert info.cdi is None and not info.annotations


@pytest.mark.parametrize("driver", DRIVERS)
def test_vf_ports_belong_to_the_pf_fme(tmp_path: Path, driver: str) -> None:
    tree = FakeTree(tmp_path)
    fpga.add_fpga(tree, driver=driver, ports=0, vfs=3)
    inventory = discover_fpgas(tmp_path)
    assert inventory.driver is Driver(driver)
    assert [port.fme.name for port in inventory.ports] == [_fme(driver, 0)] * 3
    region = scan_fpga(tmp_path, Mode.REGION).tree[REGION]
    assert list(region) == [_fme(driver, 0)]
    assert len(region[_fme(driver, 0)].nodes) == 3
    assert sorted(scan_fpga(tmp_path, Mode.AF).tree[NLB0_AF]) == [_port(driver, i) for i in range(3)]


@pytest.mark.parametrize("driver", DRIVERS)
def test_all_f_ids_are_unhealthy(tmp_path: Path, driver: str) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, driver=driver, ports=2)
    fpga.set_afu_id(tree, card.ports[1].name, fpga.UNPROGRAMMED)
    af = scan_fpga(tmp_path, Mode.AF).tree
    broken = af_resource_name(fpga.ARRIA10_INTERFACE, fpga.UNPROGRAMMED)
    assert af[broken][card.ports[1].name].health is Health.UNHEALTHY
    assert af[NLB0_AF][card.ports[0].name].health is Health.HEALTHY
    fpga.set_interface_id(tree, card, fpga.UNPROGRAMMED)
    region = scan_fpga(tmp_path, Mode.REGION).tree
    assert region[f"region-{fpga.UNPROGRAMMED}"][card.fme].health is Health.UNHEALTHY


@pytest.mark.parametrize("driver", DRIVERS)
def test_port_without_fme_is_reported_and_others_kept(tmp_path: Path, driver: str) -> None:
    tree = FakeTree(tmp_path)
    broken = fpga.add_fpga(tree, driver=driver)
    good = fpga.add_fpga(tree, driver=driver)
    tree.remove(broken.fme_sysfs)
    for mode in Mode:
        scan = scan_fpga(tmp_path, mode)
        assert len(scan.problems) == 1, mode
        assert scan.problems[0].startswith(f"{broken.ports[0].name}: no unique FME")
        assert scan.problems[0].endswith("skipped")
        ids = [device for devices in scan.tree.values() for device in devices]
        assert ids == [good.ports[0].name if mode is Mode.AF else good.fme]


def test_two_fmes_under_one_function_are_ambiguous(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, driver=fpga.OPAE)
    tree.mkdir(card.fme_sysfs.replace("fme.0", "fme.7"))
    scan = scan_fpga(tmp_path, Mode.AF)
    assert scan.tree == {}
    assert "intel-fpga-fme.0, intel-fpga-fme.7" in scan.problems[0]


def test_missing_interface_id_is_named(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree)
    tree.remove(card.interface_id_file)
    scan = scan_fpga(tmp_path, Mode.REGION)
    assert scan.tree == {}
    assert scan.problems == ("dfl-port.0: dfl-fme.0: interface ID unreadable under "
                             f"{tmp_path}{card.fme_sysfs}; skipped",)  # fmt: skip


def test_port_without_node_or_with_wrong_class_is_skipped(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    first = fpga.add_fpga(tree, driver=fpga.DFL)
    second = fpga.add_fpga(tree, driver=fpga.DFL)
    third = fpga.add_fpga(tree, driver=fpga.DFL)
    tree.remove(f"/dev/{first.ports[0].name}")
    tree.write(f"{tree.sysfs_of(second.address)}/class", "0x030000\n")
    scan = scan_fpga(tmp_path, Mode.AF)
    assert list(scan.tree[NLB0_AF]) == [third.ports[0].name]
    assert scan.problems == (
        f"dfl-port.0: no device node {tmp_path}/dev/dfl-port.0; skipped",
        "dfl-port.1: unsupported PCI class '0x030000' of 0000:11:00.0 (want 0x120000); skipped",
    )


def test_undecodable_afu_id_skips_the_port_in_af_mode_only(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, ports=2)
    tree.write(f"{card.ports[0].sysfs}/afu_id", "not-a-uuid\n")
    af = scan_fpga(tmp_path, Mode.AF)
    assert list(af.tree[NLB0_AF]) == [card.ports[1].name]
    assert af.problems[0].startswith("dfl-port.0: interface ID")
    region = scan_fpga(tmp_path, Mode.REGION)
    assert region.problems == ()
    assert len(region.tree[REGION][card.fme].nodes) == 2


def test_non_hex_interface_id_is_reported_in_region_mode(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree)
    tree.write(card.interface_id_file, "../../etc\n")
    scan = scan_fpga(tmp_path, Mode.REGION)
    assert scan.tree == {}
    assert scan.problems == ("dfl-fme.0: interface ID '../../etc' is not 32 hex digits; skipped",)


def test_no_driver_loaded_is_a_problem_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "sys/class").mkdir(parents=True)
    scan = scan_fpga(tmp_path, Mode.AF)
    assert scan.tree == {}
    assert "kernel driver is not loaded" in scan.problems[0]


def test_opae_wins_when_both_class_dirs_exist(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    fpga.add_fpga(tree, driver=fpga.DFL)
    tree.mkdir("/sys/class/fpga")
    assert discover_fpgas(tmp_path).driver is Driver.OPAE
    assert scan_fpga(tmp_path, Mode.AF).tree == {}


def test_opae_patterns_need_a_literal_dot(tmp_path: Path) -> None:
    """Upstream's unescaped ``.`` would also take ``intel-fpga-devX0`` and ``intel-fpga-portX0``."""
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, driver=fpga.OPAE)
    class_dir = tmp_path / "sys/class/fpga"
    os.symlink(os.readlink(class_dir / "intel-fpga-dev.0"), class_dir / "intel-fpga-devX0")
    port_dir = tree.path(card.ports[0].sysfs)
    (port_dir.parent / "intel-fpga-portX0").mkdir()
    scan = scan_fpga(tmp_path, Mode.AF)
    assert scan.problems == ()
    assert list(scan.tree[NLB0_AF]) == ["intel-fpga-port.0"]


def test_unreadable_numa_is_a_problem_and_the_port_stays(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree)
    tree.write(f"{tree.sysfs_of(card.address)}/numa_node", "zero\n")
    scan = scan_fpga(tmp_path, Mode.AF)
    assert scan.tree[NLB0_AF]["dfl-port.0"].numa_nodes == ()
    assert scan.problems[0].startswith("dfl-port.0: no NUMA information")


def test_region_numa_is_the_union_of_its_ports(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    card = fpga.add_fpga(tree, ports=1, vfs=1, numa_node=0)
    vf = tree.sysfs_of(card.vfs[0])
    tree.write(f"{vf}/numa_node", "1\n")
    tree.write(f"{vf}/local_cpulist", "4-7\n")
    assert scan_fpga(tmp_path, Mode.REGION).tree[REGION][card.fme].numa_nodes == (0, 1)


def test_fme_node_follows_dev_char_link(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    fpga.add_fpga(tree)
    tree.device_node("/dev/fpga/fme0")
    tree.link("/dev/char/235:0", "/dev/fpga/fme0")
    info = scan_fpga(tmp_path, Mode.REGIONDEVEL).tree[REGION]["dfl-fme.0"]
    assert info.nodes[-1].host_path == f"{tmp_path}/dev/fpga/fme0"


def test_hot_unplug_removes_the_card(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    first = fpga.add_fpga(tree)
    fpga.add_fpga(tree)
    fpga.remove_fpga(tree, first)
    scan = scan_fpga(tmp_path, Mode.REGION)
    assert scan.problems == ()
    assert list(scan.tree[REGION]) == ["dfl-fme.1"]
