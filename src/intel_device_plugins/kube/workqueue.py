"""A de-duplicating work queue with per-key back-off, as controllers need.

A key that is queued again while waiting is processed once; a key queued while being processed is processed
again afterwards, so no change is lost and no key is reconciled by two workers at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Hashable
from typing import Final, Generic, TypeVar

K = TypeVar("K", bound=Hashable)

BASE_DELAY_S: Final = 0.2
MAX_DELAY_S: Final = 30.0


def backoff(failures: int, base: float = BASE_DELAY_S, ceiling: float = MAX_DELAY_S) -> float:
    """Delay before retry number ``failures`` (1-based): exponential, capped."""
    return float(min(ceiling, base * 2 ** max(0, failures - 1)))


@dataclasses.dataclass
class WorkQueue(Generic[K]):
    """FIFO of distinct keys; ``get`` hands a key out exclusively until ``done``."""

    _queue: asyncio.Queue[K] = dataclasses.field(default_factory=asyncio.Queue)
    _waiting: set[K] = dataclasses.field(default_factory=set)
    _active: set[K] = dataclasses.field(default_factory=set)
    _dirty: set[K] = dataclasses.field(default_factory=set)
    _failures: dict[K, int] = dataclasses.field(default_factory=dict)

    def add(self, key: K) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._waiting:
            self._waiting.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self.add, key)

    async def get(self) -> K:
        key = await self._queue.get()
        self._waiting.discard(key)
        self._active.add(key)
        return key

    def done(self, key: K, *, failed: bool = False) -> float | None:
        """Release ``key``; on failure schedule a retry and return its delay."""
        self._active.discard(key)
        delay = None
        if failed:
            n = self._failures.get(key, 0) + 1
            self._failures[key] = n
            delay = backoff(n)
            self.add_after(key, delay)
        else:
            self._failures.pop(key, None)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        return delay

    def __len__(self) -> int:
        return len(self._waiting)


async def run_worker(
    queue: WorkQueue[K],
    reconcile: Callable[[K], Awaitable[float | None]],
    on_error: Callable[[K, Exception], None],
    look_again: Callable[[K, float | None], None] | None = None,
) -> None:
    """The one worker loop: take a key, reconcile it, hand it back; forever, until cancelled.

    ``reconcile`` returns when to look at the key again (None: only on the next change); after a success
    that goes to ``look_again``, or the key is simply queued again then. A failure goes to ``on_error`` and
    the key is retried with back-off, so an API server that is away never ends the loop.
    """
    while True:
        key = await queue.get()
        failed, again = False, None
        try:
            again = await reconcile(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed = True
            on_error(key, exc)
        finally:
            queue.done(key, failed=failed)
        if failed:
            continue
        if look_again is not None:
            look_again(key, again)
        elif again is not None:
            queue.add_after(key, again)
