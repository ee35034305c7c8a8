"""Running a plugin binary as a real process, for tests, benchmarks and the demo."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path


def console_script(name: str) -> str:
    """Path of a console script installed next to the running interpreter (the project's venv)."""
    return str(Path(sys.executable).parent / name)


@dataclass
class PluginProcess:
    process: asyncio.subprocess.Process
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def terminate(self, timeout: float = 5.0) -> int:
        """SIGTERM, then wait; kills after ``timeout``. Returns the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), timeout)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        assert self.process.returncode is not None
        return self.process.returncode


@contextlib.asynccontextmanager
async def plugin_process(command: Sequence[str], log_path: Path) -> AsyncIterator[PluginProcess]:
    """Start ``command`` with stdout and stderr going to ``log_path``; terminate it on exit."""
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(*command, stdout=log, stderr=asyncio.subprocess.STDOUT)
    running = PluginProcess(process, log_path)
    try:
        yield running
    finally:
        await running.terminate()
