"""Go-style command-line flags: one or two dashes, no abbreviations.

Kept free of heavy imports: short-lived commands (the FPGA CRI hook runs on every container start)
use it without loading gRPC.
"""

from __future__ import annotations

import argparse
from typing import Any


class PluginArgumentParser(argparse.ArgumentParser):
    """An argument parser whose long flags work with one or two dashes.

    Abbreviations are refused (``-shared 2`` is an error, as with Go's flag package): an abbreviation
    that works today silently changes meaning when a flag is added tomorrow.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_option_tuples(self, option_string: str) -> list[Any]:
        # argparse in Python 3.11 still matches single-dash prefixes with allow_abbrev=False.
        return []

    def add_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        return self.add_argument(f"-{name}", f"--{name}", dest=name.replace("-", "_"), **kwargs)

    def add_bool_flag(self, name: str, **kwargs: Any) -> argparse.Action:
        """A Go-style boolean flag: ``-name``, ``-name=true`` or ``-name=false``."""
        return self.add_flag(name, nargs="?", const=True, default=False, type=parse_bool, **kwargs)


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
