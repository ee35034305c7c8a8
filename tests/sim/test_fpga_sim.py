"""The simulated FPGA layout: what discovery, the hook and fpga_tool rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text


def test_dfl_card_has_fme_region_and_ports(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, driver=fpga.DFL, ports=2, interface_id="AB" * 16)
    assert card.fme == "dfl-fme.0"
    assert [port.name for port in card.ports] == ["dfl-port.0", "dfl-port.1"]
    assert [port.port_id for port in card.ports] == [0, 1]
    region = tmp_path / "sys/class/fpga_region/region0"
    assert sorted(p.name for p in region.iterdir()) == ["dfl-fme.0", "dfl-port.0", "dfl-port.1"]
    assert (
        region / "dfl-fme.0/dfl-fme-region.0/fpga_region/region1/compat_id"
    ).read_text() == "ab" * 16 + "\n"
    assert (region / "dfl-port.1/dev").read_text() == "236:1\n"
    assert (tmp_path / "dev/char/236:1").resolve() == (tmp_path / "dev/dfl-port.1").resolve()
    assert (tmp_path / "sys/dev/char/235:0").resolve() == (region / "dfl-fme.0").resolve()
    assert (tmp_path / "sys/bus/pci/devices/0000:10:00.0/class").read_text() == "0x120000\n"


def test_opae_vf_port_reaches_fme_through_physfn(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree, driver=fpga.OPAE, ports=0, vfs=2)
    assert [port.name for port in card.ports] == ["intel-fpga-port.0", "intel-fpga-port.1"]
    vf_port = tmp_path / "sys/class/fpga/intel-fpga-dev.2/intel-fpga-port.1"
    assert (vf_port / "id").read_text() == "1\n"
    vf_function = vf_port.resolve().parent.parent.parent
    fmes = list((vf_function / "physfn").glob("fpga/intel-fpga-dev.*/intel-fpga-fme.*"))
    assert [fme.name for fme in fmes] == ["intel-fpga-fme.0"]
    assert (fmes[0] / "pr/interface_id").read_text().strip() == fpga.ARRIA10_INTERFACE


def test_set_afu_id_programs_the_port(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = fpga.add_fpga(tree)
    fpga.set_afu_id(tree, card.ports[0].name, fpga.NLB3_AFU)
    assert (tree.path(card.ports[0].sysfs) / "afu_id").read_text() == fpga.NLB3_AFU + "\n"
    with pytest.raises(ValueError, match="afu_id"):
        fpga.set_afu_id(tree, card.ports[0].name, "not-hex")
    with pytest.raises(ValueError, match=r"dfl-port\.9"):
        fpga.set_afu_id(tree, "dfl-port.9", fpga.NLB3_AFU)


def test_remove_fpga_takes_its_entries_away(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    first = fpga.add_fpga(tree)
    second = fpga.add_fpga(tree)
    fpga.remove_fpga(tree, first)
    assert sorted(p.name for p in (tmp_path / "sys/class/fpga_region").iterdir()) == ["region2", "region3"]
    assert not (tmp_path / "dev" / first.ports[0].name).exists()
    assert (tmp_path / "dev" / second.ports[0].name).exists()


@pytest.mark.parametrize(
    "bad", [{"driver": "xilinx"}, {"board": "u250"}, {"ports": 0}, {"interface_id": "1"}]
)
def test_bad_options_are_named(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=str(next(iter(bad.values())))):
        fpga.add_fpga(FakeTree(tmp_path), **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("profile", ["fpga-dfl", "fpga-opae"])
def test_profiles_build(tmp_path: Path, profile: str) -> None:
    build_node(parse_node_spec(profile_text(profile)), tmp_path)
    assert list((tmp_path / "dev").glob("*-port.*"))
