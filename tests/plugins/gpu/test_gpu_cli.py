"""``intel_gpu_device_plugin`` flags: spelling, defaults, values, and the checks that stop a bad start."""

from __future__ import annotations

import argparse
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.cli import framework_config
from intel_device_plugins.plugins.gpu.cli import build_parser, build_plugins, main
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions, MonitoringMode, parse_id_list
from intel_device_plugins.plugins.gpu.healthsettings import (
    GpuHealthSettings,
    TemperatureLimits,
    XpumdHealthSettings,
    XpumdSeverity,
)
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.plugins.gpu.policy import AllocationPolicy


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def plugin_for(*argv: str) -> GpuPlugin:
    plugins = build_plugins(parse(*argv))
    assert len(plugins) == 1
    return plugins[0]


def rejected(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command with ``argv``; it must exit with code 2 before serving. Returns stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "error:" in captured.err
    return captured.err.splitlines()[-1]


# ----- accepted command lines -----------------------------------------------------------------


def test_defaults_match_upstream() -> None:
    args = parse()

    assert args.prefix == ""
    assert args.shared_dev_num == 1
    assert args.allocation_policy is AllocationPolicy.NONE
    assert args.bypath is ByPath.SINGLE
    assert args.allow_ids == frozenset()
    assert args.deny_ids == frozenset()
    assert args.enable_monitoring is False
    assert args.monitoring_mode is MonitoringMode.SINGLE
    assert (args.temp_limit, args.gpu_temp_limit, args.memory_temp_limit) == (100, 100, 100)
    assert args.xpumd_endpoint == "" and args.health_management is False
    assert args.xpumd_unhealthy_severity is XpumdSeverity.CRITICAL  # upstream 0.37's default
    # Not given: polled plugins scan every second, event-driven ones (GPU) rescan every 60 s.
    assert args.scan_interval is None
    config = framework_config(args)
    assert (config.scan_interval, config.event_rescan_interval) == (1.0, 60.0)
    explicit = framework_config(parse("-scan-interval", "5"))
    assert (explicit.scan_interval, explicit.event_rescan_interval) == (5.0, 5.0)


def test_default_command_line_builds_one_default_plugin() -> None:
    plugin = plugin_for()

    assert plugin.prefix == ""
    assert plugin.options == GpuOptions()
    assert plugin.policy is AllocationPolicy.NONE
    assert plugin.health_flags == GpuHealthSettings()


@pytest.mark.parametrize(
    "argv",
    [
        ["-shared-dev-num", "3"],
        ["--shared-dev-num", "3"],
        ["-shared-dev-num=3"],
        ["--shared-dev-num=3"],
    ],
)
def test_flags_take_one_or_two_dashes_with_or_without_equals(argv: list[str]) -> None:
    assert parse(*argv).shared_dev_num == 3


def test_every_gpu_flag_reaches_the_plugin() -> None:
    plugin = plugin_for(
        "-prefix",
        "/host",
        "-shared-dev-num",
        "4",
        "--allocation-policy=balanced",
        "-bypath=all",
        "-allow-ids",
        "0x56c0, 0x56c1",
        "-enable-monitoring",
        "-monitoring-mode",
        "split",
    )

    assert plugin.prefix == "/host"
    assert plugin.policy is AllocationPolicy.BALANCED
    assert plugin.options == GpuOptions(
        shared_dev_num=4,
        by_path=ByPath.ALL,
        allow_ids=frozenset({"0x56c0", "0x56c1"}),
        enable_monitoring=True,
        monitoring_mode=MonitoringMode.SPLIT,
    )


def test_deny_ids_reach_the_plugin() -> None:
    assert plugin_for("-deny-ids", "0xe20b").options.deny_ids == frozenset({"0xe20b"})


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], False),
        (["-enable-monitoring"], True),
        (["--enable-monitoring"], True),
        (["-enable-monitoring=true"], True),
        (["-enable-monitoring=false"], False),
        (["--enable-monitoring=false"], False),
        (["-enable-monitoring=1"], True),
        (["-enable-monitoring=0"], False),
        (["-enable-monitoring=False"], False),
    ],
)
def test_enable_monitoring_is_a_go_style_boolean(argv: list[str], expected: bool) -> None:
    assert parse(*argv).enable_monitoring is expected
    assert plugin_for(*argv).options.enable_monitoring is expected


def test_bare_boolean_flag_does_not_swallow_the_next_flag() -> None:
    args = parse("-enable-monitoring", "-shared-dev-num", "2")

    assert args.enable_monitoring is True
    assert args.shared_dev_num == 2


@pytest.mark.parametrize("policy", list(AllocationPolicy))
def test_every_allocation_policy_is_accepted(policy: AllocationPolicy) -> None:
    assert plugin_for("-allocation-policy", str(policy)).policy is policy


@pytest.mark.parametrize("mode", list(ByPath))
def test_every_bypath_mode_is_accepted(mode: ByPath) -> None:
    assert plugin_for("-bypath", str(mode)).options.by_path is mode


@pytest.mark.parametrize("mode", list(MonitoringMode))
def test_every_monitoring_mode_is_accepted(mode: MonitoringMode) -> None:
    assert plugin_for("-enable-monitoring", "-monitoring-mode", str(mode)).options.monitoring_mode is mode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", frozenset()),
        ("0x56c0", frozenset({"0x56c0"})),
        ("0x56c0,0xe20b", frozenset({"0x56c0", "0xe20b"})),
        (" 0x56c0 , 0xe20b ", frozenset({"0x56c0", "0xe20b"})),
        ("0x56c0,0x56c0", frozenset({"0x56c0"})),
    ],
)
def test_id_lists_are_comma_separated_and_trimmed(text: str, expected: frozenset[str]) -> None:
    assert parse("-allow-ids", text).allow_ids == expected
    assert parse("-deny-ids", text).deny_ids == expected


@settings(deadline=None)
@given(st.lists(st.from_regex(r"\A0x[0-9a-f]{4}\Z"), min_size=1), st.sampled_from([",", ", ", " ,"]))
def test_any_list_of_valid_ids_is_accepted(items: list[str], separator: str) -> None:
    assert parse_id_list(separator.join(items)) == frozenset(items)


def test_health_management_alone_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        plugin = plugin_for("-health-management")

    assert plugin.options == GpuOptions()
    assert any("-health-management" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    "argv",
    [
        ["-xpumd-endpoint", "/run/xpumd/intelxpuinfo.sock"],
        ["-temp-limit", "90", "-gpu-temp-limit", "80", "-memory-temp-limit", "85"],
        ["-health-management", "-temp-limit", "90"],
        ["-wsl=false"],
        ["-resource-manager=false"],
    ],
)
def test_flags_that_only_matter_elsewhere_are_accepted(argv: list[str]) -> None:
    assert plugin_for(*argv).options == GpuOptions()


@pytest.mark.parametrize("severity", ["failed", "critical", "warning"])
def test_xpumd_flags_of_upstream_037_reach_the_plugins_health_settings(severity: str) -> None:
    """A DaemonSet written for upstream 0.37 (its xpumd overlay plus the severity flag) starts."""
    plugin = plugin_for(
        "-enable-monitoring",
        "-xpumd-endpoint=/run/xpumd/intelxpuinfo.sock",
        f"-xpumd-unhealthy-severity={severity}",
    )

    assert plugin.health_flags == GpuHealthSettings(
        xpumd=XpumdHealthSettings("/run/xpumd/intelxpuinfo.sock", XpumdSeverity(severity))
    )
    assert plugin.health_flags.xpumd.enabled
    assert plugin.options == GpuOptions(enable_monitoring=True)


def test_severity_without_an_endpoint_is_kept_but_xpumd_stays_off() -> None:
    health = plugin_for("--xpumd-unhealthy-severity", "warning").health_flags

    assert health.xpumd == XpumdHealthSettings("", XpumdSeverity.WARNING)
    assert not health.xpumd.enabled


def test_level_zero_flags_reach_the_plugins_health_settings() -> None:
    health = plugin_for(
        "-health-management", "-temp-limit", "90", "-gpu-temp-limit", "80", "-memory-temp-limit", "85"
    ).health_flags

    assert health == GpuHealthSettings(level_zero=True, temperature_limits=TemperatureLimits(90, 80, 85))


def test_xpumd_source_is_logged_with_its_severity(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        plugin_for("-xpumd-endpoint", "/run/x.sock", "-xpumd-unhealthy-severity", "failed")

    assert any("/run/x.sock" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


# ----- rejected command lines -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "CRITICAL", "Warning", "error", "unknown", "ok", "critical,failed"])
def test_invalid_xpumd_severity_is_rejected_naming_the_flag_and_the_values(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    message = rejected(capsys, "-xpumd-endpoint", "/run/x.sock", "-xpumd-unhealthy-severity", value)

    assert "-xpumd-unhealthy-severity" in message
    assert "valid values: failed, critical, warning" in message


@pytest.mark.parametrize("value", ["foo", "Balanced", "", "packed,balanced"])
def test_invalid_allocation_policy_is_rejected(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert "-allocation-policy" in rejected(capsys, "-allocation-policy", value)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_shared_dev_num_must_be_a_positive_integer(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert "-shared-dev-num" in rejected(capsys, f"-shared-dev-num={value}")


def test_shared_dev_num_has_a_maximum_that_keeps_the_device_list_within_the_kubelets_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse("-shared-dev-num", "1000").shared_dev_num == 1000
    with pytest.raises(SystemExit):  # the parser alone: before the maximum, main() would start serving
        parse("-shared-dev-num=1001")
    message = capsys.readouterr().err.splitlines()[-1]
    assert "-shared-dev-num" in message and "1001 is more than 1000" in message


@pytest.mark.parametrize(
    "value",
    [
        "0x56C0",  # uppercase
        "0X56c0",
        "56c0",  # no 0x
        "0x56c0,",  # empty item from a trailing comma
        ",0x56c0",
        "0x56c0,,0x56c1",
        " , ",
        "0x56c",  # too short
        "0x56c00",  # too long
        "0x56g0",
        "0x56c0;0x56c1",
        "0x56c0 0x56c1",
    ],
)
@pytest.mark.parametrize("flag", ["-allow-ids", "-deny-ids"])
def test_invalid_id_lists_are_rejected(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    message = rejected(capsys, flag, value)

    assert flag in message


def test_invalid_id_is_named_in_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert "'0x56C1'" in rejected(capsys, "-allow-ids", "0x56c0,0x56C1")


def test_allow_and_deny_ids_together_are_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    message = rejected(capsys, "-allow-ids", "0x56c0", "-deny-ids", "0x56c1")

    assert "-allow-ids" in message
    assert "-deny-ids" in message


@pytest.mark.parametrize("argv", [["-wsl"], ["-wsl=true"], ["--wsl"], ["-wsl", "-enable-monitoring"]])
def test_wsl_mode_is_rejected(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert "-wsl" in rejected(capsys, *argv)


def test_resource_manager_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert "-resource-manager" in rejected(capsys, "-resource-manager", "-shared-dev-num", "2")


@pytest.mark.parametrize("value", ["foo", "", "SPLIT"])
def test_unknown_monitoring_mode_is_rejected_not_taken_as_split(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert "-monitoring-mode" in rejected(capsys, "-enable-monitoring", "-monitoring-mode", value)


@pytest.mark.parametrize("value", ["some", "", "ALL"])
def test_unknown_bypath_mode_is_rejected(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert "-bypath" in rejected(capsys, "-bypath", value)


def test_garbage_boolean_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert "-enable-monitoring" in rejected(capsys, "-enable-monitoring=maybe")


def test_health_management_with_xpumd_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    message = rejected(capsys, "-health-management", "-xpumd-endpoint", "/run/xpumd/intelxpuinfo.sock")

    assert "-health-management" in message
    assert "-xpumd-endpoint" in message


@pytest.mark.parametrize("limit", ["-temp-limit", "-gpu-temp-limit", "-memory-temp-limit"])
def test_xpumd_with_a_temperature_limit_is_rejected(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    assert "-xpumd-endpoint" in rejected(capsys, "-xpumd-endpoint", "/run/x.sock", limit, "90")


@pytest.mark.parametrize("argv", [["-no-such-flag"], ["-shared-dev-num"], ["stray"]])
def test_unknown_flags_missing_values_and_stray_arguments_are_rejected(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    rejected(capsys, *argv)


def test_build_plugins_names_the_flags_in_its_errors() -> None:
    with pytest.raises(ValueError, match="-allow-ids and -deny-ids"):
        build_plugins(parse("-allow-ids", "0x56c0", "-deny-ids", "0x56c1"))
    with pytest.raises(ValueError, match=r"^-wsl"):
        build_plugins(parse("-wsl"))


def test_an_empty_list_next_to_a_set_one_is_not_both_set() -> None:
    plugin = plugin_for("-allow-ids", "0x56c0", "-deny-ids", "")

    assert plugin.options.allow_ids == frozenset({"0x56c0"})
    assert plugin.options.deny_ids == frozenset()


@pytest.mark.parametrize("argv", [["-shared", "2"], ["--shared-dev", "2"], ["-p", "/x"]])
def test_abbreviated_flags_are_rejected(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err
