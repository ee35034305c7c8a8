"""The DSA and IAA command lines: upstream flags, one or two dashes, bad values rejected at start."""

from __future__ import annotations

import pytest

from intel_device_plugins.plugins.dsa import cli as dsa_cli
from intel_device_plugins.plugins.iaa import cli as iaa_cli
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin, WorkQueuePlugin


def test_dsa_flags_with_one_or_two_dashes() -> None:
    parser = dsa_cli.build_parser()
    one = parser.parse_args(["-shared-dev-num", "4", "-prefix", "/tmp/n", "-scan-interval", "2"])
    two = parser.parse_args(["--shared-dev-num=4", "--prefix=/tmp/n", "--scan-interval=2"])
    assert (one.shared_dev_num, one.prefix, one.scan_interval) == (4, "/tmp/n", 2.0)
    assert vars(one) == vars(two)


def test_dsa_driver_selects_the_plugin() -> None:
    parser = dsa_cli.build_parser()
    (queues,) = dsa_cli.build_plugins(parser.parse_args(["-shared-dev-num", "2"]))
    (vfio,) = dsa_cli.build_plugins(parser.parse_args(["-driver", "vfio-pci"]))
    assert isinstance(queues, WorkQueuePlugin) and queues.shared_dev_num == 2
    assert queues.namespace == "dsa.intel.com"
    assert isinstance(vfio, DsaVfioPlugin) and vfio.namespace == "dsa.intel.com"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-shared-dev-num", "0"], "shared-dev-num"),
        (["-shared-dev-num", "many"], "shared-dev-num"),
        (["-driver", "uio"], "driver"),
        (["-scan-interval", "-1"], "scan-interval"),
    ],
)
def test_malformed_flag_is_rejected_naming_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        dsa_cli.main(argv)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err


def test_iaa_flags() -> None:
    (plugin,) = iaa_cli.build_plugins(iaa_cli.build_parser().parse_args(["--shared-dev-num", "3"]))
    assert isinstance(plugin, WorkQueuePlugin)
    assert plugin.namespace == "iaa.intel.com" and plugin.shared_dev_num == 3
    with pytest.raises(SystemExit):
        iaa_cli.build_parser().parse_args(["-driver", "vfio-pci"])
