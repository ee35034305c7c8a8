"""``intel_fpga_device_plugin`` flags and the node annotation that overrides ``-mode``."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from intel_device_plugins.plugins.fpga.cli import build_parser, build_plugins, resolve_mode
from intel_device_plugins.plugins.fpga.discovery import Mode
from intel_device_plugins.plugins.fpga.nodemode import MODE_ANNOTATION, effective_mode, read_node_annotations


def test_defaults_and_upstream_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "")
    args = build_parser().parse_args(["-prefix", "/tmp/n", "-kubeconfig", "/k", "-master", "https://m"])
    assert (args.mode, args.kubeconfig, args.master, args.node_name) == (Mode.AF, "/k", "https://m", "")
    [plugin] = build_plugins(args)
    assert plugin.root == Path("/tmp/n") and plugin.mode is Mode.AF


def test_node_name_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-3")
    assert build_parser().parse_args([]).node_name == "worker-3"
    assert build_parser().parse_args(["--node-name=other"]).node_name == "other"


def test_unknown_mode_is_rejected_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["-mode", "bitstream"])
    assert "-mode" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("annotations", "expected", "says"),
    [
        (None, Mode.AF, ""),
        ({}, Mode.AF, ""),
        ({"other": "region"}, Mode.AF, ""),
        ({MODE_ANNOTATION: "region"}, Mode.REGION, "overrides -mode af"),
        ({MODE_ANNOTATION: " regiondevel\n"}, Mode.REGIONDEVEL, "overrides"),
        ({MODE_ANNOTATION: "af"}, Mode.AF, ""),
        ({MODE_ANNOTATION: "Region"}, Mode.AF, "names no mode"),
    ],
)
def test_effective_mode(annotations: Mapping[str, str] | None, expected: Mode, says: str) -> None:
    mode, message = effective_mode(Mode.AF, annotations)
    assert mode is expected
    assert (says in message) if says else message == ""


def test_resolve_mode_uses_the_annotation_and_logs_read_errors(caplog: pytest.LogCaptureFixture) -> None:
    args = build_parser().parse_args(["-node-name", "n1", "-mode", "regiondevel"])
    seen: list[tuple[str, str, str]] = []

    def reader(node: str, kubeconfig: str, master: str) -> Mapping[str, str]:
        seen.append((node, kubeconfig, master))
        return {MODE_ANNOTATION: "region"}

    assert resolve_mode(args, reader) is Mode.REGION
    assert seen == [("n1", "", "")]

    def failing(node: str, kubeconfig: str, master: str) -> Mapping[str, str]:
        raise OSError("connection refused")

    with caplog.at_level(logging.ERROR):
        assert resolve_mode(args, failing) is Mode.REGIONDEVEL
    assert "cannot read node n1" in caplog.text and "connection refused" in caplog.text


def test_without_node_name_the_api_is_not_asked() -> None:
    args = build_parser().parse_args(["-node-name", "", "-mode", "region"])

    def reader(node: str, kubeconfig: str, master: str) -> Mapping[str, str]:
        raise AssertionError("must not be called")

    assert resolve_mode(args, reader) is Mode.REGION


class _NodeApi(BaseHTTPRequestHandler):
    nodes: ClassVar[dict[str, dict[str, object]]] = {}

    def do_GET(self) -> None:
        name = self.path.removeprefix("/api/v1/nodes/")
        body = self.nodes.get(name)
        status = 200 if body is not None else 404
        missing = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f'nodes "{name}" not found',
            "reason": "NotFound",
            "code": 404,
        }
        payload = json.dumps(body or missing).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def node_api() -> Iterator[str]:
    _NodeApi.nodes = {
        "fpga-node": {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "fpga-node", "annotations": {MODE_ANNOTATION: "region"}},
        }
    }
    server = HTTPServer(("127.0.0.1", 0), _NodeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_read_node_annotations_through_master(node_api: str) -> None:
    assert read_node_annotations("fpga-node", master=node_api) == {MODE_ANNOTATION: "region"}
    with pytest.raises(Exception, match="not found"):
        read_node_annotations("missing", master=node_api)


def test_master_overrides_the_kubeconfig_server(node_api: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    args = build_parser().parse_args(
        ["-kubeconfig", str(kubeconfig), "-master", node_api, "-node-name", "fpga-node"]
    )
    assert resolve_mode(args) is Mode.REGION
    args = build_parser().parse_args(["-kubeconfig", str(kubeconfig), "-node-name", "fpga-node"])
    assert resolve_mode(args) is Mode.AF
