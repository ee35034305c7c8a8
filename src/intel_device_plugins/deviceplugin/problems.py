"""Logging scan problems once instead of once per scan.

Scans are pure and return their problems as text; the plugin shell hands them to a
:class:`ProblemLog`, which logs a problem when it first appears and notes when it goes away. A
broken device therefore produces one clear line, not one line a second.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable


class ProblemLog:
    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._current: frozenset[str] = frozenset()

    def report(self, problems: Iterable[str]) -> None:
        problems = frozenset(problems)
        for problem in sorted(problems - self._current):
            self._logger.warning("%s", problem)
        for problem in sorted(self._current - problems):
            self._logger.info("resolved: %s", problem)
        self._current = problems

    @property
    def current(self) -> frozenset[str]:
        return self._current
