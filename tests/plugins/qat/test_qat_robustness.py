"""Whatever the node or adf_ctl says, parsing never raises and never yields an invalid resource name."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.plugins.qat.discovery import resource_from_services
from intel_device_plugins.plugins.qat.kernel import (
    SectionConfig,
    build_kernel_tree,
    merge_sections,
    parse_adf_status,
    parse_device_config,
)

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


SECTION = st.builds(
    SectionConfig,
    processes=st.integers(0, 4),
    cy=st.integers(0, 2),
    dc=st.integers(0, 2),
    pinned=st.booleans(),
)


@given(st.lists(st.dictionaries(st.sampled_from(["SSL", "DC", "SHIM"]), SECTION, max_size=3), max_size=4))
def test_kernel_tree_advertises_each_process_once_with_unique_ids(
    devices: list[dict[str, SectionConfig]],
) -> None:
    per_device = [(f"dev{index}", sections) for index, sections in enumerate(devices)]
    merged, _ = merge_sections(per_device)
    tree = build_kernel_tree(merged, [])
    expected = sum(
        endpoint.processes
        for section in merged
        for endpoint in (section.endpoints if section.pinned else section.endpoints[:1])
    )
    ids = [device_id for resource in tree.values() for device_id in resource]
    assert len(ids) == len(set(ids)) == expected
    counters = [key for resource in tree.values() for info in resource.values() for key in info.envs]
    numbered = [key for key in counters if key != "QAT_SECTION_NAME"]
    assert len(numbered) == len(set(numbered)) == expected
