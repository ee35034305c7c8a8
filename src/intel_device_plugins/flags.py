"""Go-style command-line flags: one or two dashes, no abbreviations.

Kept free of heavy imports: short-lived commands (the FPGA CRI hook runs on every container start)
use it without loading gRPC.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


class GoFlagParser(argparse.ArgumentParser):
    """The one command-line parser of every binary: long flags work with one or two dashes.

    Abbreviations are refused (``-shared 2`` is an error, as with Go's flag package): an abbreviation
    that works today silently changes meaning when a flag is added tomorrow. A flag declared as
    ``--name`` alone is also taken as ``-name``, as Go's flag package spells it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # argparse in Python 3.11 still matches single-dash prefixes with allow_abbrev=False.
        return []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        words = sys.argv[1:] if args is None else args
        return super().parse_known_args(normalise_dashes(words, self), namespace)

    def add_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        return self.add_argument(f"-{name}", f"--{name}", dest=name.replace("-", "_"), **kwargs)

    def add_bool_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        """A Go-style boolean flag: ``-name``, ``-name=true`` or ``-name=false``."""
        return self.add_flag(name, nargs="?", const=True, default=False, type=parse_bool, **kwargs)


def normalise_dashes(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """Rewrite Go-style ``-flag`` to ``--flag`` for every long option ``parser`` knows only as ``--flag``."""
    strings = {s for a in parser._actions for s in a.option_strings}
    longs = {s[2:] for s in strings if s.startswith("--") and "-" + s[2:] not in strings}
    out = []
    for arg in argv:
        name = arg[1:].split("=", 1)[0]
        out.append("-" + arg if arg.startswith("-") and not arg.startswith("--") and name in longs else arg)
    return out


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true", "yes"):
        return True
    if lowered in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be greater than 0")
    return value


MAX_SHARED_DEV_NUM = 1000
"""Most containers that may share one device. A GPU plugin's device list costs about 30 bytes per ID, so
64 GPUs at this maximum make a 1.8 MB ListAndWatch message, under half the kubelet's 4 MiB limit; no node
runs more than a few hundred pods, so more shares would be IDs nobody can use."""


def shared_dev_num(text: str) -> int:
    """``-shared-dev-num``: a positive integer up to ``MAX_SHARED_DEV_NUM``."""
    value = positive_int(text)
    if value > MAX_SHARED_DEV_NUM:
        raise argparse.ArgumentTypeError(
            f"{value} is more than {MAX_SHARED_DEV_NUM}: "
            "the device list would near the kubelet's 4 MiB message limit"
        )
    return value
