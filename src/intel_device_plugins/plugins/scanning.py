"""What every plugin's scan shares: a pure result type and a log that does not repeat itself.

Discovery functions return the device tree together with the problems they met (one line each,
naming the device), and never log themselves. The plugin shell hands the problems to a
:class:`ProblemLog`, which logs a problem when it first appears and once more when it is gone, so a
scan that runs every second does not flood the log with the same broken file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from intel_device_plugins.deviceplugin.model import DeviceTree


@dataclass(frozen=True)
class Discovery:
    """A scan's result: the tree to serve and the problems found on the way."""

    tree: DeviceTree
    problems: tuple[str, ...] = ()


@dataclass
class ProblemLog:
    """Logs new problems as warnings and cleared ones as info; remembers only the current set."""

    logger: logging.Logger
    current: frozenset[str] = field(default_factory=frozenset)

    def report(self, problems: Iterable[str]) -> None:
        now = frozenset(problems)
        for problem in sorted(now - self.current):
            self.logger.warning("%s", problem)
        for problem in sorted(self.current - now):
            self.logger.info("resolved: %s", problem)
        self.current = now
