"""The bundled DLB node profile and the simulator's DLB kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.plugins.dlb.discovery import scan_dlb
from intel_device_plugins.sim.node import NodeSpecError, build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text


def test_the_dlb_profile_gives_two_pfs_and_eight_vfs(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("dlb"), "dlb profile"), tmp_path / "node")
    result = scan_dlb(tree.root)
    assert {resource: len(devices) for resource, devices in result.tree.items()} == {"pf": 2, "vf": 8}
    assert result.tree["pf"]["/dev/dlb0"].numa_nodes == (0,)
    assert result.problems == ()


def test_an_unknown_dlb_generation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NodeSpecError, match="unknown DLB generation"):
        build_node(parse_node_spec("[[dlb]]\ngeneration = 'dlb9'\n"), tmp_path / "node")
