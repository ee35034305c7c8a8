"""One command-line convention: every long-running command takes ``-v`` on the same ladder, Go-style."""

from __future__ import annotations

import argparse
import logging
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from intel_device_plugins.logconfig import configure_logging
from intel_device_plugins.operator import cli as operator_cli
from intel_device_plugins.plugins import combined, dracombined
from intel_device_plugins.plugins.dlb import cli as dlb_cli
from intel_device_plugins.plugins.dlb import dracli as dlb_dracli
from intel_device_plugins.plugins.dsa import cli as dsa_cli
from intel_device_plugins.plugins.dsa import dracli as dsa_dracli
from intel_device_plugins.plugins.fpga import cli as fpga_cli
from intel_device_plugins.plugins.fpga import dracli as fpga_dracli
from intel_device_plugins.plugins.gpu import cli as gpu_cli
from intel_device_plugins.plugins.gpu import dracli as gpu_dracli
from intel_device_plugins.plugins.iaa import cli as iaa_cli
from intel_device_plugins.plugins.iaa import dracli as iaa_dracli
from intel_device_plugins.plugins.npu import cli as npu_cli
from intel_device_plugins.plugins.npu import dracli as npu_dracli
from intel_device_plugins.plugins.qat import cli as qat_cli
from intel_device_plugins.plugins.qat import dracli as qat_dracli
from intel_device_plugins.plugins.sgx import cli as sgx_cli
from intel_device_plugins.plugins.sgx import dracli as sgx_dracli
from intel_device_plugins.plugins.sgx import epchook
from intel_device_plugins.rmd import cacheways, nodeagent
from intel_device_plugins.rmd import operator as rmd_operator
from intel_device_plugins.webhooks import cli as webhooks_cli

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "intel_deviceplugin_operator": operator_cli.parser,
    "intel_fpga_admissionwebhook": lambda: webhooks_cli.parser("intel_fpga_admissionwebhook"),
    "intel-rmd-operator": rmd_operator.parser,
    "intel-rmd-node-agent": nodeagent.build_parser,
    "intel-rmd-deviceplugin": cacheways.build_parser,
    "intel_device_plugins": combined.build_parser,
    "sgx_epchook": epchook.build_parser,
    "intel_dra_drivers": dracombined.build_parser,
    **{
        f"intel_{kind}_dra_driver": module.build_parser
        for kind, module in (
            ("dlb", dlb_dracli),
            ("dsa", dsa_dracli),
            ("fpga", fpga_dracli),
            ("gpu", gpu_dracli),
            ("iaa", iaa_dracli),
            ("npu", npu_dracli),
            ("qat", qat_dracli),
            ("sgx", sgx_dracli),
        )
    },
    **{
        f"intel_{kind}_device_plugin": module.build_parser
        for kind, module in (
            ("dlb", dlb_cli),
            ("dsa", dsa_cli),
            ("fpga", fpga_cli),
            ("gpu", gpu_cli),
            ("iaa", iaa_cli),
            ("npu", npu_cli),
            ("qat", qat_cli),
            ("sgx", sgx_cli),
        )
    },
}


@pytest.mark.parametrize("command", sorted(PARSERS))
@pytest.mark.parametrize(
    "spelling", [["-v", "5"], ["-v=5"], ["--v=5"], ["--verbosity", "5"], ["-verbosity=5"]]
)
def test_every_command_takes_the_same_verbosity_flag(command: str, spelling: list[str]) -> None:
    parser = PARSERS[command]()
    known, _ = parser.parse_known_args(spelling)
    assert known.verbosity == 5
    assert "4+ debug, 6+ every API request" in parser.format_help().replace("\n", " ").replace("  ", " ")


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    """Root logging as a fresh process has it (no handlers), restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers, root.level = handlers, level
    logging.getLogger("httpx").setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    ("verbosity", "level", "requests"),
    [(0, "INFO", "WARNING"), (4, "DEBUG", "WARNING"), (6, "DEBUG", "DEBUG")],
)
def test_one_ladder(fresh_logging: None, verbosity: int, level: str, requests: str) -> None:
    logging.getLogger().handlers = []
    configure_logging(verbosity)
    assert logging.getLevelName(logging.getLogger().level) == level
    assert logging.getLevelName(logging.getLogger("httpx").level) == requests


def test_every_dra_driver_binary_is_covered() -> None:
    """A DRA driver added to pyproject.toml without a parser here would escape the convention."""
    with (Path(__file__).parents[1] / "pyproject.toml").open("rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    drivers = {name for name in scripts if name.endswith("_dra_driver") or name == "intel_dra_drivers"}
    assert len(drivers) == 9
    assert drivers <= set(PARSERS)
