from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.node import NodeSpecError, build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text


def test_default_profile_builds_a_realistic_gpu_node(tmp_path: Path) -> None:
    spec = parse_node_spec(profile_text("default"))
    assert spec.numa_nodes == 2
    tree = build_node(spec, tmp_path)
    card0 = tmp_path / "sys/class/drm/card0"
    assert os.readlink(card0).endswith("/0000:10:00.0/drm/card0")
    assert (card0 / "device/vendor").read_text().strip() == "0x8086"
    assert os.readlink(card0 / "device/driver").endswith("bus/pci/drivers/i915")
    assert (tmp_path / "dev/dri/renderD128").is_file()
    assert os.readlink(tmp_path / "dev/dri/by-path/pci-0000:10:00.0-card") == "../card0"
    assert (tmp_path / "sys/devices/system/node/node1/cpulist").read_text().strip() == "8-15"
    pf = tmp_path / "sys/class/drm/card5/device"
    assert pf.joinpath("sriov_numvfs").read_text().strip() == "2"
    vf = tmp_path / "sys/class/drm/card6/device"
    assert vf.joinpath("physfn").resolve() == pf.resolve()
    assert tree.root == tmp_path


def test_hot_unplug_removes_every_trace(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec("[[gpu]]\ncount = 2\n"), tmp_path)
    gpu.remove_card(tree, 1)
    assert not (tmp_path / "sys/class/drm/card1").exists()
    assert not (tmp_path / "dev/dri/card1").exists()
    assert sorted(p.name for p in (tmp_path / "dev/dri/by-path").iterdir()) == [
        "pci-0000:10:00.0-card",
        "pci-0000:10:00.0-render",
    ]
    assert gpu.add_card(tree).index == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[fpgaa]]\ncount = 1\n", "unknown device kind [[fpgaa]]"),
        ("[node]\ncolour = 'red'\n", "unknown key(s) in [node]: colour"),
        ("[node\n", "spec.toml"),
        ("gpu = 3\n", "array of tables"),
    ],
)
def test_bad_specs_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(NodeSpecError, match=re.escape(message)):
        parse_node_spec(text, "spec.toml")


def test_unknown_key_in_a_device_entry_is_named(tmp_path: Path) -> None:
    with pytest.raises(NodeSpecError, match=r"unknown key.*cores"):
        build_node(parse_node_spec("[[gpu]]\ncores = 4\n"), tmp_path)
