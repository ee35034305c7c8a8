"""sgx_epchook: EPC sections from CPUID, the sysfs fallback, the node patch and the API call."""

from __future__ import annotations

import argparse
import io
import json
import signal
import struct
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from intel_device_plugins.plugins.sgx import epchook
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script

GIB = 1024**3


def fake_cpuid(sections: list[int], sgx: bool = True, max_leaf: int = 0x20) -> epchook.CpuidSource:
    """A CPU with the given EPC sections (sizes in bytes), encoded as leaf 0x12 reports them."""

    def cpuid(leaf: int, subleaf: int) -> tuple[int, int, int, int]:
        if leaf == 0:
            return max_leaf, 0, 0, 0
        if leaf == 7:
            return 0, (1 << 2) if sgx else 0, 0, 0
        if leaf == 0x12 and 2 <= subleaf < 2 + len(sections):
            size = sections[subleaf - 2]
            # Type 1 plus unrelated bits that must be ignored.
            return 0x1 | 0x30000, 0, (size & 0xFFFFF000) | 0x1, (size >> 32) | 0xABC00000
        return 0, 0, 0, 0

    return cpuid


@pytest.mark.parametrize(
    ("sections", "expected"),
    [([], []), ([64 * GIB], [64 * GIB]), ([GIB + 4096, 3 * GIB], [GIB + 4096, 3 * GIB])],
)
def test_epc_sections_are_decoded(sections: list[int], expected: list[int]) -> None:
    assert epchook.epc_sections(fake_cpuid(sections)) == expected


def test_no_sgx_means_no_sections() -> None:
    assert epchook.epc_sections(fake_cpuid([GIB], sgx=False)) == []
    assert epchook.epc_sections(fake_cpuid([GIB], max_leaf=0x0D)) == []


def test_cpuid_device_reader_encodes_leaf_and_subleaf_in_the_offset() -> None:
    reads: list[tuple[int, int]] = []

    def pread(size: int, offset: int) -> bytes:
        reads.append((size, offset))
        return struct.pack("<4I", 1, 2, 3, 0xFFFFFFFF)

    cpuid = epchook.cpuid_from_reader(pread)
    assert cpuid(0x12, 3) == (1, 2, 3, 0xFFFFFFFF)
    assert reads == [(16, 0x12 | (3 << 32))]
    with pytest.raises(epchook.EpcError, match="short read"):
        epchook.cpuid_from_reader(lambda size, offset: b"\0" * 8)(0, 0)


def test_size_from_injected_cpuid_wins(tmp_path: Path) -> None:
    assert epchook.epc_size(str(tmp_path), fake_cpuid([2 * GIB]))[0] == 2 * GIB


def test_sysfs_fallback_sums_numa_nodes(tmp_path: Path) -> None:
    build_node(
        parse_node_spec(f"[node]\nnuma_nodes = 2\n[[sgx]]\nepc_bytes_per_node = {8 * GIB}\n"), tmp_path
    )
    size, source = epchook.epc_size(str(tmp_path))
    assert size == 16 * GIB
    assert "sgx_total_bytes" in source


def test_garbage_sysfs_value_is_ignored(tmp_path: Path) -> None:
    tree = build_node(
        parse_node_spec(f"[node]\nnuma_nodes = 2\n[[sgx]]\nepc_bytes_per_node = {GIB}\n"), tmp_path
    )
    tree.write("/sys/devices/system/node/node1/x86/sgx_total_bytes", "lots\n")
    assert epchook.epc_size(str(tmp_path))[0] == GIB


def test_nothing_to_read_means_zero(tmp_path: Path) -> None:
    assert epchook.epc_size(str(tmp_path))[0] == 0


@pytest.mark.parametrize(
    ("size", "text"),
    [(64 * GIB, "64Gi"), (GIB + 512 * 1024**2, "1536Mi"), (1000, "1000"), (0, "0"), (4096, "4Ki")],
)
def test_binary_si(size: int, text: str) -> None:
    assert epchook.binary_si(size) == text


def test_node_patch() -> None:
    assert epchook.node_patch(GIB, register=True, node_label=True) == [
        {"op": "add", "path": "/status/capacity/sgx.intel.com~1epc", "value": "1Gi"},
        {"op": "add", "path": "/metadata/labels/sgx.intel.com~1capable", "value": "true"},
    ]
    assert epchook.node_patch(0, register=False, node_label=True) == []
    assert epchook.node_patch(0, register=True, node_label=True) == [
        {"op": "add", "path": "/status/capacity/sgx.intel.com~1epc", "value": "0"}
    ]


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status = 200

    def do_PATCH(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).requests.append(
            {
                "path": self.path,
                "auth": self.headers["Authorization"],
                "type": self.headers["Content-Type"],
                "body": json.loads(self.rfile.read(length)),
            }
        )
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[tuple[HTTPServer, type[_Recorder]]]:
    handler = type("Recorder", (_Recorder,), {"requests": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, handler
    finally:
        server.shutdown()
        server.server_close()


def hook_args(prefix: Path, *flags: str) -> argparse.Namespace:
    return epchook.build_parser().parse_args(["-prefix", str(prefix), *flags])


def test_register_patches_the_node_status(
    tmp_path: Path, api_server: tuple[HTTPServer, type[_Recorder]]
) -> None:
    server, handler = api_server
    build_node(parse_node_spec(f"[[sgx]]\nepc_bytes_per_node = {4 * GIB}\n"), tmp_path)
    api = epchook.ApiServer(f"http://127.0.0.1:{server.server_address[1]}", "secret-token")
    out = io.StringIO()
    code = epchook.run(
        hook_args(tmp_path, "-register", "-node-label"), {"NODE_NAME": "node-a"}, lambda: api, out
    )
    assert code == 0
    assert out.getvalue() == ""
    (request,) = handler.requests
    assert request["path"] == "/api/v1/nodes/node-a/status"
    assert request["auth"] == "Bearer secret-token"
    assert request["type"] == "application/json-patch+json"
    assert request["body"][0] == {"op": "add", "path": "/status/capacity/sgx.intel.com~1epc", "value": "4Gi"}


def test_api_error_is_fatal_with_a_message(
    tmp_path: Path, api_server: tuple[HTTPServer, type[_Recorder]], caplog: pytest.LogCaptureFixture
) -> None:
    server, handler = api_server
    handler.status = 403
    build_node(parse_node_spec("[[sgx]]\n"), tmp_path)
    api = epchook.ApiServer(f"http://127.0.0.1:{server.server_address[1]}", "t")
    assert epchook.run(hook_args(tmp_path, "-register"), {"NODE_NAME": "n"}, lambda: api) == 1
    assert "HTTP 403" in caplog.text


def test_register_without_node_name_fails(tmp_path: Path) -> None:
    def no_api() -> epchook.ApiServer:
        raise AssertionError("must not be called")

    assert epchook.run(hook_args(tmp_path, "-register"), {}, no_api) == 1


def test_in_cluster_needs_the_service_environment(tmp_path: Path) -> None:
    with pytest.raises(epchook.EpcError, match="KUBERNETES_SERVICE_HOST"):
        epchook.in_cluster({}, tmp_path)
    with pytest.raises(epchook.EpcError, match="service account"):
        epchook.in_cluster(
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path
        )


def test_hook_binary_prints_the_nfd_line(tmp_path: Path) -> None:
    build_node(parse_node_spec(f"[node]\nnuma_nodes = 2\n[[sgx]]\nepc_bytes_per_node = {GIB}\n"), tmp_path)
    result = subprocess.run(
        [console_script("sgx_epchook"), "-prefix", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert result.stdout == f"sgx.intel.com/epc={2 * GIB}"


def test_affirm_without_epc_fails(tmp_path: Path) -> None:
    result = subprocess.run(
        [console_script("intel_sgx_epchook"), "--prefix", str(tmp_path), "-affirm"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "SGX EPC is not available" in result.stderr
    assert result.stdout == ""


def test_daemon_prints_then_waits_for_sigterm(tmp_path: Path) -> None:
    build_node(parse_node_spec(f"[[sgx]]\nepc_bytes_per_node = {GIB}\n"), tmp_path)
    process = subprocess.Popen(
        [console_script("sgx_epchook"), "-prefix", str(tmp_path), "-daemon"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.read(len(f"sgx.intel.com/epc={GIB}"))
        assert line == f"sgx.intel.com/epc={GIB}".encode()
        assert process.poll() is None  # still running: it waits for a signal
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_real_cpuid_device_when_present() -> None:
    """On a machine with the cpuid driver, leaf 0 gives the CPU vendor string in EBX, EDX, ECX."""
    cpuid = epchook.open_cpuid_device(Path(epchook.CPUID_DEVICE))
    if cpuid is None:
        pytest.skip("no readable /dev/cpu/0/cpuid here")
    _max_leaf, ebx, ecx, edx = cpuid(0, 0)
    vendor = struct.pack("<3I", ebx, edx, ecx).decode("ascii")
    assert vendor in {"GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls", "  Shanghai  "}
