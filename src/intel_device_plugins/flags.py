"""Go-style command-line flags: one or two dashes, no abbreviations.

Kept free of heavy imports: short-lived commands (the FPGA CRI hook runs on every container start)
use it without loading gRPC.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection, Sequence
from typing import Any


class GoFlagParser(argparse.ArgumentParser):
    """The one command-line parser of every binary: long flags work with one or two dashes.

    Abbreviations are refused (``-shared 2`` is an error, as with Go's flag package): an abbreviation
    that works today silently changes meaning when a flag is added tomorrow. A flag declared as
    ``--name`` alone is also taken as ``-name``, as Go's flag package spells it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        self.option_strings: set[str] = set()
        """Every option string added with :meth:`add_argument` (or the flag helpers), kept here because
        argparse lists its actions only in a private attribute."""
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.option_strings.update(action.option_strings)
        return action

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        words = normalise_dashes(sys.argv[1:] if args is None else args, self.option_strings)
        kept, abbreviated = split_abbreviations(words, self.option_strings)
        known, extras = super().parse_known_args(kept, namespace)
        return known, [*extras, *abbreviated]

    def add_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        return self.add_argument(f"-{name}", f"--{name}", dest=name.replace("-", "_"), **kwargs)

    def add_bool_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        """A Go-style boolean flag: ``-name``, ``-name=true`` or ``-name=false``."""
        return self.add_flag(name, nargs="?", const=True, default=False, type=parse_bool, **kwargs)


def normalise_dashes(argv: Sequence[str], strings: Collection[str]) -> list[str]:
    """Rewrite Go-style ``-flag`` to ``--flag`` for every long option of ``strings`` (a parser's option
    strings) known only as ``--flag``."""
    longs = {s[2:] for s in strings if s.startswith("--") and "-" + s[2:] not in strings}
    out = []
    for arg in argv:
        name = arg[1:].split("=", 1)[0]
        out.append("-" + arg if arg.startswith("-") and not arg.startswith("--") and name in longs else arg)
    return out


def split_abbreviations(argv: Sequence[str], strings: Collection[str]) -> tuple[list[str], list[str]]:
    """``(argv without abbreviations, the abbreviations)``: single-dash words that argparse would take
    for a known option they are not (a prefix such as ``-shared`` of ``-shared-dev-num``, or ``-v4``
    for ``-v 4``), which argparse in Python 3.11 matches even with ``allow_abbrev=False``. They become
    unrecognized arguments, as Go's flag package has them. Words after ``--`` are left alone."""
    kept: list[str] = []
    abbreviated: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--":
            kept += argv[index:]
            break
        name = arg.split("=", 1)[0]
        single = len(name) > 1 and name[0] == "-" and name[1] != "-"
        if (
            single
            and name not in strings
            and (name[:2] in strings or any(s.startswith(name) for s in strings))
        ):
            abbreviated.append(arg)
        else:
            kept.append(arg)
    return kept, abbreviated


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
