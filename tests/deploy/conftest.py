"""Fixtures of the deploy tests: helm from tools/helm/build.sh, kubectl from the Kubernetes test binaries."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm() -> Path:
    proc = subprocess.run([str(ROOT / "tools" / "helm" / "build.sh")], capture_output=True, text=True)
    if proc.returncode:
        _missing(f"tools/helm/build.sh failed: {proc.stderr[-800:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def kubectl() -> Path:
    path = ROOT / "test" / "k8s" / "bin" / "kubectl"
    if not path.exists():
        _missing("kubectl is missing: run test/k8s/build.sh")
    return path
