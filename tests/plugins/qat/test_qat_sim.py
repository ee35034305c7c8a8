"""The bundled QAT node profile and the simulator's QAT kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths, build_tree, find_vfs
from intel_device_plugins.plugins.qat.kernel import KernelPaths, run_command, scan_kernel
from intel_device_plugins.sim.node import NodeSpecError, build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.qat import ADF_CTL


def test_the_qat_profile_gives_64_vfs_in_three_resources(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("qat"), "qat profile"), tmp_path / "node")
    paths, config = QatPaths(tree.root), DpdkConfig()
    result = build_tree(paths, find_vfs(paths, config).vfs, config)
    counts = {
        resource: (len(devices), sum(info.health is Health.HEALTHY for info in devices.values()))
        for resource, devices in result.tree.items()
    }
    assert counts == {"cy": (32, 16), "dc": (16, 16), "asym-dc": (16, 16)}
    assert {info.numa_nodes for info in result.tree["asym-dc"].values()} == {(1,)}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("generation = 'qat9'", "unknown QAT generation"),
        ("colour = 'red'", "colour"),
        ("iommu = 'x'", "iommu"),
    ],
)
def test_bad_qat_entries_are_refused_by_name(entry: str, message: str, tmp_path: Path) -> None:
    spec = parse_node_spec(f"[[qat]]\n{entry}\n")
    with pytest.raises(NodeSpecError, match=message):
        build_node(spec, tmp_path / "node")


def test_the_kernel_profile_has_a_working_adf_ctl_and_configs(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("qat-kernel"), "qat-kernel profile"), tmp_path / "node")
    output = run_command([str(tree.path(ADF_CTL)), "status"])
    assert "There is 2 QAT acceleration device(s)" in output
    result = scan_kernel(KernelPaths(tree.root), output)
    assert {resource: len(devices) for resource, devices in result.tree.items()} == {
        "cy1_dc0": 4,
        "cy0_dc1": 4,
    }
    assert result.problems == ()
