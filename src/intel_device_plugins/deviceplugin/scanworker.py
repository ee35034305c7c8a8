"""Scans on a thread of their own, so a read that blocks cannot freeze the event loop.

A read from sysfs can block for as long as a wedged driver likes. On the event loop that would stop
every gRPC call of every resource (and in the combined process, of every device kind) and delay
SIGTERM. Each plugin therefore scans on its own daemon thread; the event loop only waits for the
result, with a deadline. A scan that misses the deadline is reported with the place it is stuck in
(the file it is reading), the previous devices stay served, and no second scan is started while the
first one hangs. A daemon thread does not keep the process alive: on shutdown a thread still stuck
is left behind (see :func:`exit_leaving_stuck_threads`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Result = TypeVar("Result")

THREAD_NAME_PREFIX = "scan "
_STOP = object()


def describe_frame(frame: types.FrameType | None) -> str:
    """Where a thread is: the innermost ``path`` it works on, and the function and line.

    The sysfs helpers name their argument ``path``, so a scan stuck in a read is reported with the
    file it reads. Without such a variable, the innermost function is named.
    """
    innermost = frame
    while frame is not None:
        value = frame.f_locals.get("path")
        if isinstance(value, str | os.PathLike):
            code = frame.f_code
            where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
            return f"at {os.fspath(value)} ({where})"
        frame = frame.f_back
    if innermost is None:
        return "at an unknown place"
    code = innermost.f_code
    return f"in {code.co_name} ({os.path.basename(code.co_filename)}:{innermost.f_lineno})"


class ScanWorker(Generic[Result]):
    """Runs ``work`` on one daemon thread, one call at a time, and hands results to the event loop."""

    def __init__(self, work: Callable[[], Result], name: str) -> None:
        self._work = work
        self.name = name
        self._jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending: asyncio.Future[Result] | None = None

    @property
    def busy(self) -> bool:
        """A call was started and has not returned yet."""
        return self._pending is not None and not self._pending.done()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def request(self) -> asyncio.Future[Result]:
        """The future of the running call, or of a new one when none is running."""
        if self._pending is not None and not self._pending.done():
            return self._pending
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, args=(loop,), name=f"{THREAD_NAME_PREFIX}{self.name}", daemon=True
            )
            self._thread.start()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending = future
        self._jobs.put(future)
        return future

    def whereabouts(self) -> str:
        """Where the worker thread is right now (for the report of a scan that hangs)."""
        thread = self._thread
        if thread is None or thread.ident is None:
            return "not started"
        return describe_frame(sys._current_frames().get(thread.ident))

    def close(self) -> None:
        """Let the thread end once its current call returns."""
        self._jobs.put(_STOP)

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP or not isinstance(job, asyncio.Future):
                return
            try:
                result = self._work()
            except BaseException as error:  # handed to the awaiting side as it is
                self._deliver(loop, job, None, error)
            else:
                self._deliver(loop, job, result, None)

    @staticmethod
    def _deliver(
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Result],
        result: Result | None,
        error: BaseException | None,
    ) -> None:
        def settle() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for the result any more
            loop.call_soon_threadsafe(settle)


def stuck_scan_threads(timeout: float = 0.2) -> list[threading.Thread]:
    """Scan threads still running after giving each up to ``timeout`` seconds to finish."""
    stuck = []
    for thread in threading.enumerate():
        if thread.name.startswith(THREAD_NAME_PREFIX) and thread.daemon:
            thread.join(timeout)
            if thread.is_alive():
                stuck.append(thread)
    return stuck


def exit_leaving_stuck_threads(code: int) -> None:
    """After a graceful shutdown: if a scan thread is stuck in a read, end the process anyway.

    Sockets are removed and servers stopped by then; what is left is a thread blocked in the
    kernel, which would otherwise hold up interpreter shutdown.
    """
    stuck = stuck_scan_threads()
    if not stuck:
        return
    frames = sys._current_frames()
    for thread in stuck:
        where = describe_frame(frames.get(thread.ident)) if thread.ident is not None else ""
        log.warning("exiting while %r is still stuck %s", thread.name.removeprefix(THREAD_NAME_PREFIX), where)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class DeadlineScans(Generic[Result]):
    """Scans on a :class:`ScanWorker`, each waited for until ``deadline``.

    A scan that misses the deadline is reported once, with where it is stuck, and no other scan starts
    until it returns; its late result is dropped (what it read may be long out of date) and
    ``on_late_return`` asks for a fresh one. A failing scan is logged once per distinct error. The
    device-plugin manager and the DRA driver scan this one way.
    """

    def __init__(
        self, work: Callable[[], Result], name: str, deadline: float, on_late_return: Callable[[], None]
    ) -> None:
        self.worker: ScanWorker[Result] = ScanWorker(work, name)
        self.name = name
        self.deadline = deadline
        self._on_late_return = on_late_return
        self._stuck_since: float | None = None
        self._last_error = ""
        self.started = 0
        """Scans started (observability and tests)."""

    @property
    def stuck(self) -> bool:
        """A scan has been running for longer than the deadline."""
        return self._stuck_since is not None

    @property
    def busy(self) -> bool:
        return self.worker.busy

    async def next(self, stop: asyncio.Event, stuck_wait: float) -> Result | None:
        """The next scan's result; ``None`` when it failed, missed the deadline or ``stop`` was set.

        While a scan is stuck, each call waits up to ``stuck_wait`` for it instead of the deadline.
        """
        if not self.worker.busy:
            self.started += 1
        future = self.worker.request()
        await wait_any(stop, future, timeout=self.deadline if self._stuck_since is None else stuck_wait)
        if not future.done():
            if self._stuck_since is None and not stop.is_set():
                self._stuck_since = time.monotonic()
                log.error(
                    "%s: scan has not returned after %.1f s; it is stuck %s. Keeping the previous"
                    " devices; no new scan starts until this one returns",
                    self.name,
                    self.deadline,
                    self.worker.whereabouts(),
                )
            return None
        if self._stuck_since is not None:
            log.warning(
                "%s: the stuck scan returned after %.1f s; scanning again",
                self.name,
                time.monotonic() - self._stuck_since + self.deadline,
            )
            self._stuck_since = None
            self._on_late_return()
            return None
        error = future.exception()
        if error is not None:
            message = f"{self.name}: scan failed: {error!r}"
            if message != self._last_error:
                log.error("%s; keeping the previous devices", message, exc_info=error)
                self._last_error = message
            return None
        self._last_error = ""
        return future.result()

    def close(self) -> None:
        self.worker.close()


async def wait_any(*awaitables: asyncio.Event | Awaitable[object], timeout: float) -> None:
    """Wait until one event is set or one future is done, or ``timeout`` passes. Cancels nothing given."""
    waiters: list[asyncio.Future[object]] = []
    owned: list[asyncio.Future[object]] = []
    for item in awaitables:
        if isinstance(item, asyncio.Event):
            waiter: asyncio.Future[object] = asyncio.ensure_future(item.wait())
            owned.append(waiter)
        else:
            waiter = asyncio.ensure_future(item)
        waiters.append(waiter)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in owned:
            waiter.cancel()
