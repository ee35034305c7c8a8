"""``intel_gpu_dra_driver``'s flags: GPU options reach the profile; bad input stops it before it starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.model import TaintKeys
from intel_device_plugins.plugins.gpu.discovery import ByPath
from intel_device_plugins.plugins.gpu.dracli import build_parser, build_profile, main


def test_gpu_flags_reach_the_profile() -> None:
    args = build_parser().parse_args(
        ["-node-name=n", "-prefix=/tmp/node", "-bypath=none", "-deny-ids=0x56c0"]
    )

    profile = build_profile(args)

    assert profile.prefix == "/tmp/node"
    assert profile.options.by_path is ByPath.NONE
    assert profile.options.deny_ids == frozenset({"0x56c0"})
    assert profile.driver_name == "gpu.intel.com"


def test_taint_effects_default_to_intels_and_can_be_changed() -> None:
    default = build_profile(build_parser().parse_args(["-node-name=n"]))
    changed = build_profile(
        build_parser().parse_args(["-critical-taint-effect=NoSchedule", "-warning-taint-effect=None"])
    )

    assert (default.health_taints.keys, default.health_taints.critical, default.health_taints.warning) == (
        TaintKeys.CATEGORIES,
        "NoExecute",
        "NoSchedule",
    )
    assert (changed.health_taints.critical, changed.health_taints.warning) == ("NoSchedule", "None")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["-critical-taint-effect=Evict"])


def test_allow_and_deny_lists_together_are_refused() -> None:
    args = build_parser().parse_args(["-allow-ids=0x56c0", "-deny-ids=0x56c1"])

    with pytest.raises(ValueError, match="-allow-ids and -deny-ids"):
        build_profile(args)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["-kubeconfig=/nonexistent"], "-node-name is required"),
        (["-node-name=n", "-kubeconfig=/nonexistent/kubeconfig"], "-kubeconfig /nonexistent/kubeconfig"),
        (["-node-name=n", "-allow-ids=0x56c0", "-deny-ids=0x56c1"], "-allow-ids and -deny-ids"),
        (["-node-name=n", "-allow-ids=56c0"], "invalid PCI device ID"),
        (["-node-name=n", "-pod-uid=../x"], "instance UID"),
    ],
)
def test_bad_input_exits_with_2_naming_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("POD_UID", raising=False)

    with pytest.raises(SystemExit) as exited:
        main(argv)

    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_a_socket_path_too_long_for_unix_sockets_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / ("d" * 120)

    with pytest.raises(SystemExit):
        main(["-node-name=n", f"-kubelet-plugins-directory-path={deep}", "-kubeconfig=/nonexistent"])

    assert "-kubelet-plugins-directory-path" in capsys.readouterr().err


def test_a_registrar_directory_too_deep_for_its_socket_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / ("r" * (100 - len(str(tmp_path))))

    with pytest.raises(SystemExit):
        main(["-node-name=n", f"-kubelet-registrar-directory-path={deep}", "-kubeconfig=/nonexistent"])

    assert "-kubelet-registrar-directory-path" in capsys.readouterr().err
