"""Where a plugin process's memory goes: resident memory after each import, per gRPC stack.

Run from the repository root: ``.venv/bin/python bench/bench_memory.py`` (a few seconds; prints
Markdown). Each stack is imported step by step in a fresh interpreter, and ``VmRSS`` is read after
every step, so a row is what that step adds on top of the ones above it.

The pure-Python gRPC stack (grpclib, which brings h2, hpack, hyperframe and multidict) is not a
dependency of this project; to measure it, install it into a separate virtual environment with the
same protobuf version and pass its interpreter::

    uv venv /tmp/grpclib-venv && VIRTUAL_ENV=/tmp/grpclib-venv uv pip install grpclib protobuf==<ours>
    .venv/bin/python bench/bench_memory.py --grpclib-python /tmp/grpclib-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src"

PROBE = """
import importlib, json, sys
if sys.argv[1] == "no-ssl":
    sys.modules["ssl"] = None
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
steps = [["interpreter", rss()]]
for module in sys.argv[2:]:
    importlib.import_module(module)
    steps.append([module, rss()])
print(json.dumps(steps))
"""

PB2 = "intel_device_plugins.deviceplugin.api.deviceplugin_v1beta1_pb2"
GRPCIO_STEPS = (
    "asyncio",
    "grpc",
    "grpc.aio",
    PB2,
    "intel_device_plugins.deviceplugin.server",
    "intel_device_plugins.deviceplugin.cli",
    "intel_device_plugins.plugins.gpu.cli",
)
GRPCLIB_STEPS = ("asyncio", "google.protobuf", PB2, "grpclib.server", "grpclib.client")


def probe(python: str, ssl: bool, modules: Sequence[str]) -> list[tuple[str, float]]:
    environment = dict(os.environ, PYTHONPATH=str(SOURCE))
    output = subprocess.run(
        [python, "-c", PROBE, "ssl" if ssl else "no-ssl", *modules],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    ).stdout
    return [(name, float(value)) for name, value in json.loads(output)]


def table(title: str, steps: Sequence[tuple[str, float]]) -> str:
    lines = [f"### {title}", "", "| step | VmRSS after | added |", "|---|---|---|"]
    previous = 0.0
    for name, value in steps:
        lines.append(f"| `{name}` | {value:.1f} MiB | +{value - previous:.1f} MiB |")
        previous = value
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--grpclib-python", help="interpreter of a virtual environment with grpclib")
    args = parser.parse_args(argv)
    sections = [
        table(
            "grpcio, as a plugin binary runs it (ssl not loaded)", probe(sys.executable, False, GRPCIO_STEPS)
        ),
        table("grpcio, with ssl (any other program)", probe(sys.executable, True, GRPCIO_STEPS)),
    ]
    if args.grpclib_python:
        sections.append(
            table("grpclib + protobuf, ssl not loaded", probe(args.grpclib_python, False, GRPCLIB_STEPS))
        )
        sections.append(
            table("grpclib + protobuf, with ssl", probe(args.grpclib_python, True, GRPCLIB_STEPS))
        )
    command = " ".join([".venv/bin/python", "bench/bench_memory.py", *(argv or sys.argv[1:])])
    print(f"Command: `{command}`; Python {sys.version.split()[0]}.\n")
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
