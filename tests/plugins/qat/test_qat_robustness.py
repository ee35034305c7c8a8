"""Whatever the node or adf_ctl says, parsing never raises and never yields an invalid resource name."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.plugins.qat.discovery import resource_from_services
from intel_device_plugins.plugins.qat.kernel import parse_adf_status, parse_device_config

RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

SERVICE_TEXT = st.text(alphabet=st.sampled_from(list("symacdz;; \t\n-_.$ü")), max_size=30)


@given(st.one_of(SERVICE_TEXT, st.text(max_size=40)))
def test_services_give_a_valid_resource_name_or_none(services: str) -> None:
    name = resource_from_services(services)
    assert name is None or RESOURCE_NAME.match(name)
    assert name is None or ";" not in name


@given(st.text(max_size=400))
def test_adf_ctl_output_never_raises(output: str) -> None:
    report = parse_adf_status(output)
    assert all(device.id.startswith("dev") for device in report.devices)


INI_LINES = st.sampled_from(
    [
        "[SSL]",
        "[GENERAL]",
        "[DEFAULT]",
        "NumProcesses = 2",
        "NumberCyInstances = x",
        "NumberDcInstances = 1",
        "LimitDevAccess = maybe",
        "LimitDevAccess = 1",
        "key",
        "= value",
        "[",
        "%(interp)s",
        "",
    ]
)


@given(st.one_of(st.lists(INI_LINES, max_size=15).map("\n".join), st.text(max_size=200)))
def test_device_config_never_raises(text: str) -> None:
    sections, problems = parse_device_config(text, "dev.conf")
    for config in sections.values():
        assert min(config.processes, config.cy, config.dc) >= 0
    assert all(problem.startswith("dev.conf") for problem in problems)
