"""Go-style flags: one or two dashes, ``--name``-only options also as ``-name``, no abbreviations."""

from __future__ import annotations

import pytest

from intel_device_plugins.flags import GoFlagParser, normalise_dashes, split_abbreviations


def _parser() -> GoFlagParser:
    parser = GoFlagParser(prog="t")
    parser.add_flag("shared-dev-num", type=int, default=1)
    parser.add_bool_flag("enable-monitoring")
    parser.add_argument("--kubeconfig", default="")
    parser.add_argument("-v", type=int, default=0)
    return parser


def test_every_added_option_string_is_known() -> None:
    assert _parser().option_strings == {
        "-h",
        "--help",
        "-shared-dev-num",
        "--shared-dev-num",
        "-enable-monitoring",
        "--enable-monitoring",
        "--kubeconfig",
        "-v",
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["-shared-dev-num", "3", "-enable-monitoring", "-kubeconfig", "/k", "-v", "4"],
        ["--shared-dev-num=3", "--enable-monitoring=true", "--kubeconfig=/k", "-v=4"],
        ["-shared-dev-num=3", "-enable-monitoring", "true", "-kubeconfig=/k", "-v", "4"],
    ],
)
def test_one_or_two_dashes(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.shared_dev_num, args.enable_monitoring, args.kubeconfig, args.v) == (3, True, "/k", 4)


def test_a_long_only_option_is_rewritten_and_nothing_else() -> None:
    strings = _parser().option_strings
    argv = ["-kubeconfig=/k", "-kubeconfig", "-v", "-shared-dev-num", "--kubeconfig", "-x", "value"]
    assert normalise_dashes(argv, strings) == [
        "--kubeconfig=/k",
        "--kubeconfig",
        "-v",
        "-shared-dev-num",
        "--kubeconfig",
        "-x",
        "value",
    ]


@pytest.mark.parametrize(
    "argv", [["-shared", "2"], ["--shared", "2"], ["-kube=/k"], ["-enable"], ["-v4"], ["-s", "2"]]
)
def test_abbreviations_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(argv)
    assert "unrecognized arguments" in capsys.readouterr().err


def test_abbreviations_are_set_aside_but_values_numbers_and_words_after_the_end_are_not() -> None:
    strings = _parser().option_strings
    argv = ["-v", "-1", "-shared-dev-num=2", "-shared=2", "x", "-ena", "--", "-shared"]
    assert split_abbreviations(argv, strings) == (
        ["-v", "-1", "-shared-dev-num=2", "x", "--", "-shared"],
        ["-shared=2", "-ena"],
    )


def test_parse_known_args_returns_abbreviations_as_extras() -> None:
    args, extras = _parser().parse_known_args(["-shared-dev-num", "2", "-shared", "3", "-unknown"])
    assert args.shared_dev_num == 2
    assert sorted(extras) == ["-shared", "-unknown", "3"]
