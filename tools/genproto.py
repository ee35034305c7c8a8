"""Generate the Python gRPC stubs for the kubelet APIs from the .proto files in the API directories.

Usage: python tools/genproto.py [OUTPUT_ROOT]

OUTPUT_ROOT defaults to ``src``; the staleness test passes a temporary directory and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

SOURCE_ROOT = Path(__file__).resolve().parent.parent / "src"
API_PROTOS: dict[Path, tuple[str, ...]] = {
    Path("intel_device_plugins/deviceplugin/api"): (
        "deviceplugin_v1beta1.proto",
        "podresources_v1.proto",
        "pluginregistration_v1.proto",
    ),
    Path("intel_device_plugins/dra/api"): (
        "dra_v1.proto",
        "dra_health_v1.proto",
        "dra_health_v1alpha1.proto",
    ),
}
"""API directory (relative to the source root) -> the protos in it."""


def generate(output_root: Path) -> None:
    """Write ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` for every proto under ``output_root``."""
    include = protoc._get_resource_file_name("grpc_tools", "_proto")  # well-known types
    bin_dir = Path(sys.executable).parent
    for api_dir, protos in API_PROTOS.items():
        (output_root / api_dir).mkdir(parents=True, exist_ok=True)
        for proto in protos:
            _compile(output_root, include, bin_dir, api_dir / proto)


def _compile(output_root: Path, include: str, bin_dir: Path, proto: Path) -> None:
    args = [
        "protoc",
        f"-I{SOURCE_ROOT}",
        f"-I{include}",
        f"--python_out={output_root}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out={output_root}",
        f"--mypy_grpc_out={output_root}",
        f"--grpc_python_out={output_root}",
        str(proto),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed for {proto}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE_ROOT)
