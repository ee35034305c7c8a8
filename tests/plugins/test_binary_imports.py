"""No shipped binary loads grpcio or protobuf's runtime.

Device plugins, DRA drivers and the RMD node agent speak to the kubelet through grpclib with the
generated codecs (``kubeletapi/rpc.py``, ``kubeletapi/*_v*.py``); importing grpcio or protobuf would cost
each process 10 to 12 MiB of resident memory for nothing (docs/performance.md). Each entry module is
imported in a fresh interpreter, because this test process has both loaded already; the binaries are
read from pyproject.toml, so a new one is covered.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from intel_device_plugins.plugins.dracombined import KINDS

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
FORBIDDEN = ("grpc", "google.protobuf")


def _entries() -> dict[str, str]:
    scripts: dict[str, str] = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    return {name: target.split(":", 1)[0] for name, target in scripts.items()}


def _driver_entries() -> dict[str, str]:
    return {
        name: module
        for name, module in _entries().items()
        if name.endswith("_dra_driver") or name == "intel_dra_drivers"
    }


def _loaded(modules: list[str]) -> list[str]:
    """The forbidden modules (or their submodules) in ``sys.modules`` after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "print(json.dumps(sorted(n for n in sys.modules"
        " if any(n == f or n.startswith(f + '.') for f in forbidden))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def test_every_driver_binary_is_listed() -> None:
    entries = _driver_entries()
    assert "intel_dra_drivers" in entries
    assert {f"intel_{kind}_dra_driver" for kind in KINDS} <= set(entries)


@pytest.mark.parametrize(("binary", "module"), sorted(_driver_entries().items()))
def test_driver_binary_imports_neither_grpcio_nor_protobuf(binary: str, module: str) -> None:
    # The combined binary imports each kind's module when asked for it: all of them here.
    modules = [module, *KINDS.values()] if binary == "intel_dra_drivers" else [module]
    assert _loaded(modules) == [], f"{binary} ({module}) loads grpcio or protobuf"


def test_no_other_binary_imports_grpcio_or_protobuf() -> None:
    """Device plugins, the RMD node agent and the rest, in one interpreter (a hit names no binary:
    bisect by hand)."""
    others = sorted(set(_entries().values()) - set(_driver_entries().values()))
    assert "intel_device_plugins.plugins.gpu.cli" in others
    assert "intel_device_plugins.rmd.nodeagent" in others
    assert _loaded(others) == []


def test_the_check_sees_grpcio_and_protobuf() -> None:
    """The tests' reference classes load both: the same check must find them, or it proves nothing."""
    loaded = _loaded(["k8stest.kubeletapi.deviceplugin_v1beta1_pb2_grpc"])
    assert "grpc" in loaded and "google.protobuf" in loaded
