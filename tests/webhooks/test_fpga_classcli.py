"""``intel_fpga_deviceclasses``: YAML in (files or stdin), the classes out, bad input named."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.webhooks import classcli
from tests.webhooks.podfixtures import AF_NLB0, IFACE, NLB3, REGION, af, region


class Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], stdin: bytes = b""
) -> tuple[int, list[Any], str]:
    monkeypatch.setattr(sys, "stdin", Stdin(stdin))
    code = classcli.main(argv)
    out, err = capsys.readouterr()
    return code, [d for d in yaml.safe_load_all(out) if d], err


def test_files_and_stdin_give_the_classes_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "a.yaml"
    first.write_text(yaml.safe_dump_all([af("nlb0", ns="a"), {"apiVersion": "v1", "kind": "Namespace"}]))
    listing = {"apiVersion": "v1", "kind": "List", "items": [af("nlb0", ns="b"), region("r", ns="b")]}
    code, docs, err = run(monkeypatch, capsys, [str(first), "-"], json.dumps(listing).encode())
    assert (code, err) == (0, "")
    assert [d["kind"] for d in docs] == ["DeviceClass", "DeviceClass"]
    assert sorted(d["spec"]["extendedResourceName"] for d in docs) == sorted([AF_NLB0, REGION])
    assert all("app.kubernetes.io/managed-by" not in d["metadata"]["labels"] for d in docs), (
        "classes for GitOps are not the webhook's to manage"
    )


def test_stdin_is_the_default(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, _ = run(monkeypatch, capsys, [], yaml.safe_dump(af("x", afu=NLB3, mode="region")).encode())
    assert code == 0
    assert [d["metadata"]["name"] for d in docs] == [f"region-{IFACE}.fpga.intel.com"]


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (
            yaml.safe_dump_all([af("ok"), af("bad", afu="XYZ", ns="t")]),
            "stdin, document 2: AcceleratorFunction t/bad: spec.afuId 'XYZ'",
        ),
        ("a: [", "stdin: not YAML"),
        ("- 1\n", "stdin, document 1: not an object"),
        (
            json.dumps({"kind": "List", "items": [region("r", iface="zz", ns="n")]}),
            r"stdin, document 1, items\[0\]: FpgaRegion n/r: spec.interfaceId 'zz'",
        ),
    ],
)
def test_bad_input_fails_naming_where_and_what_and_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, message: str
) -> None:
    code, docs, err = run(monkeypatch, capsys, ["-"], stdin.encode())
    assert code == 1 and docs == []
    assert err.startswith("intel_fpga_deviceclasses: ")
    assert re.search(message, err), err


def test_oversized_and_missing_files_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(classcli, "MAX_INPUT_BYTES", 64)
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(af("x")))
    code, _, err = run(monkeypatch, capsys, [str(big)])
    assert code == 1 and f"{big}: larger than 64 bytes" in err
    code, _, err = run(monkeypatch, capsys, [str(tmp_path / "none.yaml")])
    assert code == 1 and "none.yaml: No such file" in err
