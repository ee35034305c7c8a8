"""Reference classes of xpumd's device-info API, generated once per session from the .proto kept in the
tree (protobuf's descriptor pool takes a file once per process)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from grpc_tools import protoc  # type: ignore[import-untyped]

from intel_device_plugins.deviceplugin.health import xpumdwire

PROTO = Path(xpumdwire.__file__).with_name("deviceinfo.proto")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the _grpc module imports deviceinfo_pb2 by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def deviceinfo_protos(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    """``(deviceinfo_pb2, deviceinfo_pb2_grpc)``, generated now with grpcio-tools."""
    out = tmp_path_factory.mktemp("deviceinfo")
    args = ["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_python_out={out}", PROTO.name]
    assert protoc.main(args) == 0
    return _load("deviceinfo_pb2", out / "deviceinfo_pb2.py"), _load(
        "deviceinfo_pb2_grpc", out / "deviceinfo_pb2_grpc.py"
    )


@pytest.fixture
def pb(deviceinfo_protos: tuple[ModuleType, ModuleType]) -> ModuleType:
    return deviceinfo_protos[0]
