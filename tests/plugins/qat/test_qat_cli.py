"""The QAT plugin's command line: upstream flags, one or two dashes, and bad values refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.cli import framework_config
from intel_device_plugins.plugins.qat.cli import Mode, build_parser, build_plugins
from intel_device_plugins.plugins.qat.discovery import DEFAULT_KERNEL_VF_DRIVERS
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin, QatKernelPlugin
from intel_device_plugins.plugins.qat.policy import Policy


def test_defaults_match_upstream() -> None:
    args = build_parser().parse_args([])
    assert args.dpdk_driver == "vfio-pci"
    assert args.kernel_vf_drivers == DEFAULT_KERNEL_VF_DRIVERS
    assert args.allocation_policy is Policy.NONE
    assert args.max_num_devices == 64
    assert args.mode is Mode.DPDK
    assert framework_config(args).scan_interval == 1.0


def test_flags_work_with_one_or_two_dashes() -> None:
    args = build_parser().parse_args(
        ["-dpdk-driver", "igb_uio", "--kernel-vf-drivers=c6xxvf,4xxxvf", "-allocation-policy=packed",
         "--max-num-devices", "8", "-prefix", "/tmp/n", "--scan-interval=0.5"]
    )  # fmt: skip
    assert args.dpdk_driver == "igb_uio"
    assert args.kernel_vf_drivers == ("c6xxvf", "4xxxvf")
    assert args.allocation_policy is Policy.PACKED
    assert args.max_num_devices == 8
    assert args.prefix == "/tmp/n"
    assert args.scan_interval == 0.5


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-dpdk-driver", "uio_pci_generic"], "-dpdk-driver"),
        (["-kernel-vf-drivers", "4xxxvf,bogusvf"], "-kernel-vf-drivers"),
        (["-kernel-vf-drivers", ""], "-kernel-vf-drivers"),
        (["-allocation-policy", ""], "-allocation-policy"),
        (["-allocation-policy", "spread"], "-allocation-policy"),
        (["-max-num-devices", "0"], "-max-num-devices"),
        (["-max-num-devices", "many"], "-max-num-devices"),
        (["-mode", "userspace"], "-mode"),
        (["-scan-interval", "-1"], "-scan-interval"),
    ],
)
def test_malformed_values_are_rejected_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


def test_dpdk_mode_builds_the_dpdk_plugin_with_the_flags(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["-prefix", str(tmp_path), "-max-num-devices", "3", "-dpdk-driver", "igb_uio"]
    )
    [plugin] = build_plugins(args)
    assert isinstance(plugin, QatDpdkPlugin)
    assert plugin.paths.root == tmp_path
    assert plugin.config.max_devices == 3
    assert plugin.config.dpdk_driver == "igb_uio"


def test_kernel_mode_builds_the_kernel_plugin() -> None:
    [plugin] = build_plugins(build_parser().parse_args(["-mode", "kernel"]))
    assert isinstance(plugin, QatKernelPlugin)
    assert plugin.paths.root == Path("/")
