"""The health policy: findings and settings in, each device's verdict out."""

from __future__ import annotations

import pytest

from intel_device_plugins.deviceplugin.health.model import (
    Finding,
    HealthSettings,
    HealthState,
    Severity,
    TemperatureLimits,
    assess,
    parse_unhealthy_severity,
    verdict,
)
from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra import model as dra_model

GPU = "0000:03:00.0"


def xpumd(category: str, severity: Severity, device: str = GPU, message: str = "") -> Finding:
    return Finding(device, "xpumd", category, severity, message)


def test_the_dra_framework_shares_the_three_state_enum() -> None:
    assert dra_model.HealthState is HealthState


@pytest.mark.parametrize(
    ("threshold", "severity", "state"),
    [
        ("critical", Severity.OK, HealthState.HEALTHY),
        ("critical", Severity.WARNING, HealthState.HEALTHY),
        ("critical", Severity.CRITICAL, HealthState.UNHEALTHY),
        ("critical", Severity.FAILED, HealthState.UNHEALTHY),
        ("warning", Severity.WARNING, HealthState.UNHEALTHY),
        ("failed", Severity.CRITICAL, HealthState.HEALTHY),
        ("failed", Severity.FAILED, HealthState.UNHEALTHY),
        ("warning", Severity.UNKNOWN, HealthState.UNKNOWN),
    ],
)
def test_a_severity_at_or_over_the_threshold_makes_the_device_unhealthy(
    threshold: str, severity: Severity, state: HealthState
) -> None:
    result = verdict([xpumd("memory", severity)], HealthSettings.from_flag(threshold))
    assert result.state is state


def test_the_verdict_names_the_severity_that_decided_it_worst_first() -> None:
    findings = [
        xpumd("frequency", Severity.WARNING, message="throttled"),
        xpumd("memory", Severity.FAILED, message="replace"),
        xpumd("pci_link", Severity.CRITICAL),
        xpumd("temperature", Severity.OK),
    ]
    result = verdict(findings, HealthSettings())
    assert result.state is HealthState.UNHEALTHY and result.severity is Severity.FAILED
    assert [r.category for r in result.reasons] == ["memory", "pci_link"]
    assert result.message == "xpumd memory failed: replace; xpumd pci_link critical"


def test_a_warning_under_the_threshold_leaves_the_device_healthy_with_that_warning() -> None:
    result = verdict([xpumd("frequency", Severity.WARNING), xpumd("memory", Severity.OK)], HealthSettings())
    assert (result.state, result.severity) == (HealthState.HEALTHY, Severity.WARNING)
    assert [r.category for r in result.reasons] == ["frequency"]
    clean = verdict([xpumd("memory", Severity.OK)], HealthSettings())
    assert (clean.state, clean.severity, clean.reasons) == (HealthState.HEALTHY, Severity.OK, ())


def test_unknown_only_when_nothing_known_and_an_unknown_domain_does_not_hide_a_known_one() -> None:
    settings = HealthSettings()
    assert verdict([], settings).state is HealthState.UNKNOWN
    assert verdict([xpumd("memory", Severity.UNKNOWN)], settings).state is HealthState.UNKNOWN
    mixed = [xpumd("memory", Severity.UNKNOWN), xpumd("frequency", Severity.OK)]
    assert verdict(mixed, settings).state is HealthState.HEALTHY


def test_dra_ignore_health_warning_sets_the_threshold() -> None:
    warning = [xpumd("temperature", Severity.WARNING)]
    assert verdict(warning, HealthSettings.for_dra()).state is HealthState.HEALTHY
    strict = HealthSettings.for_dra(ignore_health_warning=False)
    assert verdict(warning, strict).state is HealthState.UNHEALTHY


def test_temperature_readings_are_rated_by_the_limits_of_their_kind() -> None:
    limits = TemperatureLimits(gpu=90, memory=80, other=95)
    settings = HealthSettings(temperatures=limits)

    def reading(category: str, celsius: float) -> Finding:
        return Finding(GPU, "hwmon", category, Severity.UNKNOWN, celsius=celsius)

    assert verdict([reading("temperature.gpu", 90)], settings).state is HealthState.HEALTHY
    hot = verdict([reading("temperature.gpu", 91)], settings)
    assert (hot.state, hot.severity) == (HealthState.UNHEALTHY, Severity.CRITICAL)
    assert "91 °C over the limit of 90 °C" in hot.message
    assert verdict([reading("temperature.memory", 81)], settings).state is HealthState.UNHEALTHY
    assert verdict([reading("temperature.package", 94)], settings).state is HealthState.HEALTHY
    assert verdict([reading("temperature.package", 96)], settings).state is HealthState.UNHEALTHY


def test_assess_gives_every_named_and_every_listed_device_a_verdict() -> None:
    other = "0000:04:00.0"
    result = assess(
        [xpumd("memory", Severity.CRITICAL), xpumd("memory", Severity.OK, device=other)],
        HealthSettings(),
        devices=[GPU, "0000:05:00.0"],
    )
    assert {device: v.state for device, v in result.items()} == {
        GPU: HealthState.UNHEALTHY,
        other: HealthState.HEALTHY,
        "0000:05:00.0": HealthState.UNKNOWN,
    }


def test_the_plugin_api_gets_two_states_and_unknown_folds_as_asked() -> None:
    settings = HealthSettings()
    assert verdict([], settings).plugin_health() is Health.HEALTHY
    assert verdict([], settings).plugin_health(unknown=Health.UNHEALTHY) is Health.UNHEALTHY
    assert verdict([xpumd("memory", Severity.CRITICAL)], settings).plugin_health() is Health.UNHEALTHY


def test_bad_settings_and_findings_are_refused_naming_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"-xpumd-unhealthy-severity, valid values: failed, critical"):
        parse_unhealthy_severity("fatal")
    with pytest.raises(ValueError, match="unhealthy_at must be"):
        HealthSettings(unhealthy_at=Severity.OK)
    with pytest.raises(ValueError, match="names no device"):
        Finding("", "aer", "aer-fatal", Severity.FAILED)
    with pytest.raises(TypeError, match=r"0000:03:00\.0"):
        Finding(GPU, "aer", "aer-fatal", 3)  # type: ignore[arg-type]
