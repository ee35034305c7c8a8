"""The missing-binaries policy: skip on a developer machine, fail under CI=true."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k8stest import pytest_plugin
from k8stest.binaries import REQUIRED, Binaries, find_binaries


def test_empty_directory_reports_every_missing_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K8S_TEST_BIN_DIR", str(tmp_path))
    bins, reason = find_binaries()
    assert bins is None
    for name in (*REQUIRED, "kwok-stages/"):
        assert name in reason
    assert "test/k8s/build.sh" in reason


def test_complete_directory_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in REQUIRED:
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    (tmp_path / "kwok-stages").mkdir()
    monkeypatch.setenv("K8S_TEST_BIN_DIR", str(tmp_path))
    bins, reason = find_binaries()
    assert bins == Binaries(tmp_path) and reason == ""


def test_non_executable_binary_counts_as_missing(tmp_path: Path) -> None:
    for name in REQUIRED:
        (tmp_path / name).write_text("")
        os.chmod(tmp_path / name, 0o755 if name != "kwok" else 0o644)
    (tmp_path / "kwok-stages").mkdir()
    assert Binaries(tmp_path).missing() == ["kwok"]


def test_missing_binaries_fail_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and nothing here"):
        pytest_plugin._unavailable("nothing here")


def test_missing_binaries_skip_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="nothing here"):
        pytest_plugin._unavailable("nothing here")
