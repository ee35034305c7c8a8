"""Logging of a call that keeps failing and is retried: a line when it starts failing, a reminder now
and then, a line when it works again.

A node agent retries API calls for as long as the API server is away, every second or so; a warning per
attempt filled the log with the same line. What an operator needs is when it went, that it is still
away, and when it came back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

REMIND_S: Final = 60.0
"""Seconds between reminders while the failures go on."""


class OutageLog:
    """The state (working or failing) of one retried call, logged on each change and every ``remind_s``."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        *,
        remind_s: float = REMIND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self._log = logger
        self._remind_s = remind_s
        self._clock = clock
        self._since: float | None = None
        self._reminded = 0.0
        self._failures = 0

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, error: BaseException, retry_s: float) -> None:
        """One more failed attempt; ``retry_s`` is when the next one comes."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = self._reminded = now
            self._log.warning("%s failed: %s; retrying in %.1f s", self.what, error, retry_s)
        elif now - self._reminded >= self._remind_s:
            self._reminded = now
            self._log.warning(
                "%s still failing after %.0f s and %d attempts: %s",
                self.what,
                now - self._since,
                self._failures,
                error,
            )

    def succeeded(self) -> None:
        """The call worked: logged when it had been failing."""
        if self._since is None:
            return
        self._log.info(
            "%s works again after %.0f s and %d failed attempts",
            self.what,
            self._clock() - self._since,
            self._failures,
        )
        self._since, self._failures = None, 0
