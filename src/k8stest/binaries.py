"""Locating the Kubernetes binaries that ``test/k8s/build.sh`` builds.

Why a lookup with an explicit policy: in CI (``CI=true``) a missing binary must fail the run, never
quietly skip the integration tier; on a developer machine without Go it is fine to skip with a
reason that says how to build them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BIN_DIR_ENV = "K8S_TEST_BIN_DIR"
REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "devicemanager-harness",
)


@dataclass(frozen=True)
class Binaries:
    """One directory of built binaries plus kwok's stage files."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def kwok_stages(self) -> Path:
        return self.directory / "kwok-stages"

    def missing(self) -> list[str]:
        gone = [n for n in REQUIRED if not os.access(self.path(n), os.X_OK)]
        if not self.kwok_stages.is_dir():
            gone.append("kwok-stages/")
        return gone


def repo_root() -> Path | None:
    """The checkout this package lives in (src layout), if it is one."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "test" / "k8s" / "build.sh").is_file():
            return parent
    return None


def candidate_dir() -> Path | None:
    """``$K8S_TEST_BIN_DIR`` if set, else the ``test/k8s/bin`` link the build script leaves."""
    env = os.environ.get(BIN_DIR_ENV)
    if env:
        return Path(env)
    root = repo_root()
    if root is not None:
        link = root / "test" / "k8s" / "bin"
        if link.exists():
            return link.resolve()
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def find_binaries() -> tuple[Binaries | None, str]:
    """Return the binaries, or None and a sentence saying what is missing and how to fix it."""
    directory = candidate_dir()
    hint = f"run test/k8s/build.sh and export {BIN_DIR_ENV}=<the directory it prints>"
    if directory is None:
        return None, f"Kubernetes test binaries not found: {hint}"
    bins = Binaries(directory)
    missing = bins.missing()
    if missing:
        return None, f"Kubernetes test binaries missing in {directory}: {', '.join(missing)}; {hint}"
    return bins, ""
