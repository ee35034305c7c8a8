"""``intel-sim-xpumd``: the simulated xpumd as a process, scripted through its standard input.

It serves the GPUs found below ``--root`` (``/sys/class/drm/card<N>``: a simulated node's directory, or
``/`` on a real node, to try a plugin's xpumd wiring without xpumd) on ``--socket``. Each line read from
standard input is one command naming a GPU by its PCI address:

    overheat <bdf> | cool_down <bdf> | memory_errors <bdf> | lose <bdf> | attach <bdf> | crash | restart

It answers ``ok <line>`` or ``error <line>: <why>`` on standard output, after ``serving <socket>`` once
it listens. End of input stops only the commands (a daemon's input is often ``/dev/null``); SIGTERM or
SIGINT stop the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final, TextIO

from intel_device_plugins.deviceplugin.health.xpumd import DEFAULT_SOCKET
from intel_device_plugins.sim.xpumd import SimulatedXpumd

log = logging.getLogger(__name__)

GPU_COMMANDS: Final = ("overheat", "cool_down", "memory_errors", "lose", "attach")
DAEMON_COMMANDS: Final = ("crash", "restart")


async def run_command(daemon: SimulatedXpumd, line: str) -> str:
    """One command line → the answer line (never raises for a bad command)."""
    words = line.split()
    if not words:
        return ""
    name, arguments = words[0], words[1:]
    try:
        if name in GPU_COMMANDS and len(arguments) == 1:
            bdf = arguments[0].lower()
            if bdf not in daemon.xpus:
                raise ValueError(f"no GPU {bdf} (known: {', '.join(sorted(daemon.xpus)) or 'none'})")
            action: Callable[[str], None] = getattr(daemon, name)
            action(bdf)
        elif name == "crash" and not arguments:
            await daemon.crash()
        elif name == "restart" and not arguments:
            await daemon.restart()
        else:
            raise ValueError(f"usage: {' | '.join(f'{c} <bdf>' for c in GPU_COMMANDS)} | crash | restart")
    except (ValueError, OSError) as error:
        return f"error {line.strip()}: {error}"
    return f"ok {line.strip()}"


def _read_lines(source: TextIO, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    for line in source:
        loop.call_soon_threadsafe(queue.put_nowait, line)
    loop.call_soon_threadsafe(queue.put_nowait, None)


async def serve(args: argparse.Namespace, commands: TextIO, answers: TextIO) -> None:
    daemon = SimulatedXpumd.for_node(Path(args.socket), Path(args.root), interval=args.interval)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await daemon.start()
    print(f"serving {daemon.socket} ({len(daemon.xpus)} GPUs)", file=answers, flush=True)
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    threading.Thread(target=_read_lines, args=(commands, loop, queue), daemon=True).start()
    stopping = asyncio.ensure_future(stop.wait())
    try:
        reading = True
        while not stop.is_set():
            if not reading:
                await stopping
                break
            getting = asyncio.ensure_future(queue.get())
            await asyncio.wait((getting, stopping), return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                break
            line = getting.result()
            if line is None:
                reading = False
                continue
            answer = await run_command(daemon, line)
            if answer:
                print(answer, file=answers, flush=True)
    finally:
        stopping.cancel()
        with contextlib.suppress(Exception):
            await daemon.stop()


class XpumdProcess:
    """A running ``intel-sim-xpumd`` and the pipe its commands go through (for tests and the demo)."""

    def __init__(self, process: asyncio.subprocess.Process, socket: Path) -> None:
        self.process = process
        self.socket = socket

    async def send(self, command: str, timeout: float = 5.0) -> str:
        """Run one command; its answer line (``ok …`` or ``error …``)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        return (await asyncio.wait_for(self.process.stdout.readline(), timeout)).decode().strip()


@contextlib.asynccontextmanager
async def xpumd_process(
    executable: str, socket: Path, root: Path, interval: float = 5.0, log_path: Path | None = None
) -> AsyncIterator[XpumdProcess]:
    """``intel-sim-xpumd`` serving ``root``'s GPUs on ``socket`` for the block's duration."""
    with contextlib.ExitStack() as files:
        log = files.enter_context(log_path.open("wb")) if log_path is not None else asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            executable,
            "--socket", str(socket), "--root", str(root), "--interval", str(interval),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    running = XpumdProcess(process, socket)
    try:
        assert process.stdout is not None
        first = await asyncio.wait_for(process.stdout.readline(), 30)
        if not first.startswith(b"serving"):
            raise RuntimeError(f"intel-sim-xpumd did not start: {first.decode(errors='replace')!r}")
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="intel-sim-xpumd", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=str(DEFAULT_SOCKET), help="where to serve (default: %(default)s)")
    parser.add_argument("--root", default="/", help="the node whose GPUs to serve (default: /)")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="seconds between health snapshots (xpumd's default: 5)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.interval <= 0:
        build_parser().error("--interval must be positive")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    asyncio.run(serve(args, sys.stdin, sys.stdout))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
