"""The shared DRA flag group: spellings, environment defaults, and errors that name the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.cli import driver_config, new_driver_parser
from intel_device_plugins.dra.driver import DEFAULT_EVENT_RESCAN_INTERVAL, DEFAULT_POLL_INTERVAL, DriverConfig


def parse(argv: list[str], environ: dict[str, str] | None = None) -> DriverConfig:
    return driver_config(new_driver_parser("test", "test", environ or {}).parse_args(argv))


def test_defaults_are_the_kubelets_paths_and_the_environment_names_node_and_pod() -> None:
    config = parse([], {"NODE_NAME": "node-a", "POD_UID": "0b5c1d2e-aaaa-bbbb-cccc-000000000001"})

    assert config == driver_config(
        new_driver_parser("test", "test", {}).parse_args(
            [
                "-node-name=node-a",
                "--pod-uid",
                "0b5c1d2e-aaaa-bbbb-cccc-000000000001",
                "-cdi-root",
                "/var/run/cdi",
                "-kubelet-registrar-directory-path=/var/lib/kubelet/plugins_registry",
                "--kubelet-plugins-directory-path=/var/lib/kubelet/plugins",
            ]
        )
    )
    assert config.registrar_dir == Path("/var/lib/kubelet/plugins_registry")
    assert config.plugins_dir == Path("/var/lib/kubelet/plugins")
    assert config.cdi_root == Path("/var/run/cdi")
    assert config.instance_uid == "0b5c1d2e-aaaa-bbbb-cccc-000000000001"
    assert config.poll_interval == DEFAULT_POLL_INTERVAL
    assert config.event_rescan_interval == DEFAULT_EVENT_RESCAN_INTERVAL


def test_a_flag_overrides_the_environment() -> None:
    config = parse(["-node-name", "node-b"], {"NODE_NAME": "node-a"})

    assert config.node_name == "node-b"


def test_scan_interval_sets_both_intervals() -> None:
    config = parse(["-node-name=n", "-scan-interval=5"])

    assert (config.poll_interval, config.event_rescan_interval) == (5.0, 5.0)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([], "-node-name is required"),
        (["-node-name=Node_A"], "-node-name 'Node_A'"),
        (["-node-name=" + "a" * 254], "-node-name"),
        (["-node-name=n", "-cdi-root="], "-cdi-root must not be empty"),
        (["-node-name=n", "-kubelet-plugins-directory-path="], "-kubelet-plugins-directory-path"),
    ],
)
def test_bad_values_name_the_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        parse(argv)


def test_a_non_positive_scan_interval_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        new_driver_parser("test", "test", {}).parse_args(["-scan-interval=0"])

    assert "scan-interval" in capsys.readouterr().err
