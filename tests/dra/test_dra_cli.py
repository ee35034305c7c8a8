"""The shared DRA flag group: spellings, environment defaults, and errors that name the flag."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from intel_device_plugins.dra.cli import (
    driver_config,
    fake_root,
    new_driver_parser,
    run_driver_command,
    shared_argv,
)
from intel_device_plugins.dra.driver import DEFAULT_EVENT_RESCAN_INTERVAL, DEFAULT_POLL_INTERVAL, DriverConfig
from intel_device_plugins.dra.profile import DriverProfile


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


# ----- Intel's DRA drivers' flags and environment variables ------------------------------------------


def test_intels_environment_variables_give_the_defaults() -> None:
    environ = {
        "NODE_NAME": "node-a",
        "CDI_ROOT": "/etc/cdi",
        "KUBECONFIG": "/k/config",
        "HEALTHCHECK_PORT": "-1",
        "KUBE_API_QPS": "20",
        "KUBE_API_BURST": "40",
    }
    args = new_driver_parser("test", "test", environ).parse_args([])
    config = driver_config(args)
    assert (config.node_name, config.cdi_root, config.healthcheck_port) == ("node-a", Path("/etc/cdi"), -1)
    assert (args.kubeconfig, args.kube_api_qps, args.kube_api_burst) == ("/k/config", 20.0, 40)


def test_intels_flags_with_their_defaults() -> None:
    args = new_driver_parser("test", "test", {}).parse_args(["--node-name=n"])
    assert (args.healthcheck_port, args.kube_api_qps, args.kube_api_burst) == (51516, 5.0, 10)
    args = new_driver_parser("test", "test", {}).parse_args(
        ["--node-name=n", "--healthcheck-port=8081", "--kube-api-qps=2.5", "--kube-api-burst", "3"]
    )
    assert (driver_config(args).healthcheck_port, args.kube_api_qps, args.kube_api_burst) == (8081, 2.5, 3)


@pytest.mark.parametrize(
    "argv",
    [["-healthcheck-port=65536"], ["-healthcheck-port=http"], ["-kube-api-qps=0"], ["-kube-api-burst=0"]],
)
def test_bad_values_of_intels_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        new_driver_parser("test", "test", {}).parse_args(["-node-name=n", *argv])
    assert argv[0].split("=")[0].lstrip("-") in capsys.readouterr().err


def test_the_shared_flags_pass_intels_flags_on() -> None:
    args = new_driver_parser("test", "test", {}).parse_args(["-node-name=n", "-healthcheck-port=-1"])
    argv = shared_argv(args)
    assert "-healthcheck-port=-1" in argv and "-kube-api-qps=5.0" in argv and "-kube-api-burst=10" in argv
    again = new_driver_parser("test", "test", {}).parse_args(argv)
    assert (again.healthcheck_port, again.kube_api_qps, again.kube_api_burst) == (-1, 5.0, 10)


def test_sysfs_and_devfs_root_name_the_fake_root(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "dev").mkdir()
    both = {"SYSFS_ROOT": f"{tmp_path}/sys", "DEVFS_ROOT": f"{tmp_path}/dev/"}
    assert fake_root("", both) == str(tmp_path)
    assert fake_root("", {"SYSFS_ROOT": f"{tmp_path}/sys"}) == str(tmp_path)
    assert fake_root("", {"DEVFS_ROOT": f"{tmp_path}/dev"}) == str(tmp_path)
    assert fake_root("", {"SYSFS_ROOT": "/sys", "DEVFS_ROOT": "/dev"}) == "", "the real ones"
    assert fake_root("/p", {}) == "/p"
    assert fake_root(str(tmp_path), both) == str(tmp_path), "the flag and the variables agree"


@pytest.mark.parametrize(
    ("environ", "prefix", "message"),
    [
        ({"SYSFS_ROOT": "/sysfs"}, "", "SYSFS_ROOT=/sysfs: .*<root>/sys"),
        ({"SYSFS_ROOT": "{root}/a/sys", "DEVFS_ROOT": "{root}/b/dev"}, "", "not <root>/sys and <root>/dev"),
        ({"SYSFS_ROOT": "sys"}, "", "not an absolute path"),
        ({"SYSFS_ROOT": "{root}/missing/sys"}, "", "missing/sys .* is not a directory"),
        ({"SYSFS_ROOT": "{root}/sys"}, "/elsewhere", "-prefix /elsewhere and SYSFS_ROOT"),
    ],
)
def test_a_fake_root_that_cannot_be_used_is_an_error_not_the_real_sys(
    tmp_path: Path, environ: dict[str, str], prefix: str, message: str
) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "dev").mkdir()
    resolved = {name: value.format(root=tmp_path) for name, value in environ.items()}
    with pytest.raises(ValueError, match=message):
        fake_root(prefix, resolved)


def test_a_fake_root_without_its_dev_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    with pytest.raises(ValueError, match=f"{tmp_path}/dev .*not a directory"):
        fake_root("", {"SYSFS_ROOT": f"{tmp_path}/sys"})


def test_the_driver_command_takes_its_prefix_from_sysfs_root(tmp_path: Path) -> None:
    """``SYSFS_ROOT`` reaches the profile as ``-prefix`` does; a wrong one stops the driver at once."""
    (tmp_path / "sys").mkdir()
    (tmp_path / "dev").mkdir()
    seen: list[str] = []

    def build(args: argparse.Namespace) -> DriverProfile:
        seen.append(args.prefix)
        raise ValueError("stop here")

    parser = new_driver_parser("test", "test", {})
    with pytest.raises(SystemExit):
        run_driver_command(parser, build, ["-node-name=n"], {"SYSFS_ROOT": f"{tmp_path}/sys"})
    assert seen == [str(tmp_path)]
    with pytest.raises(SystemExit):
        run_driver_command(parser, build, ["-node-name=n"], {"SYSFS_ROOT": f"{tmp_path}/nothing/sys"})
    assert seen == [str(tmp_path)], "the profile is never built on a fake root that is not there"
