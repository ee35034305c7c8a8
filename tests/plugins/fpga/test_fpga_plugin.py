"""The FPGA plugin shell: scans, problems logged once, watched directories, the combined process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from intel_device_plugins.plugins.combined import build_kind, build_parser
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.plugin import AFU_RESCAN_INTERVAL, FpgaPlugin
from intel_device_plugins.sim import fpga
from intel_device_plugins.sim.fakefs import FakeTree

REGION = f"region-{fpga.ARRIA10_INTERFACE}"


def test_scan_serves_the_mode_and_logs_a_broken_port_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree = FakeTree(tmp_path)
    broken = fpga.add_fpga(tree)
    fpga.add_fpga(tree)
    tree.remove(broken.fme_sysfs)
    plugin = FpgaPlugin(str(tmp_path), Mode.REGION)
    assert plugin.namespace == "fpga.intel.com"
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert list(plugin.scan()[REGION]) == ["dfl-fme.1"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "dfl-port.0: no unique FME" in warnings[0].getMessage()


def test_watch_paths_cover_dev_and_the_class_dirs_present(tmp_path: Path) -> None:
    assert FpgaPlugin(str(tmp_path)).watch_paths() == (tmp_path / "dev",)
    fpga.add_fpga(FakeTree(tmp_path))
    assert FpgaPlugin(str(tmp_path)).watch_paths() == (tmp_path / "dev", tmp_path / "sys/class/fpga_region")
    fpga.add_fpga(FakeTree(tmp_path), driver=fpga.OPAE)
    assert FpgaPlugin(str(tmp_path)).watch_paths() == (
        tmp_path / "dev",
        tmp_path / "sys/class/fpga",
        tmp_path / "sys/class/fpga_region",
    )


def test_af_mode_rescans_sooner_than_region_mode() -> None:
    assert FpgaPlugin(mode=Mode.AF).safety_rescan_interval() == AFU_RESCAN_INTERVAL < 60
    assert FpgaPlugin(mode=Mode.REGION).safety_rescan_interval() == 60


def test_combined_process_builds_the_fpga_kind_with_its_mode(tmp_path: Path) -> None:
    parser = build_parser()
    common = ["-prefix", str(tmp_path), "-device-plugin-dir", "/tmp/dp", "-cdi-dir", "/tmp/cdi"]
    [plugin] = build_kind("fpga -mode regiondevel -node-name ''", common, parser)
    assert isinstance(plugin, FpgaPlugin)
    assert plugin.mode is Mode.REGIONDEVEL and plugin.root == tmp_path
