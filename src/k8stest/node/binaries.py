"""Where the node's executables are (``test/node/build.sh``) and whether this machine can run a node."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from k8stest.binaries import repo_root

NODE_BIN_DIR_ENV = "NODE_TEST_BIN_DIR"
NODE_REQUIRED = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "busybox")
CNI_PLUGINS = ("bridge", "host-local", "loopback")


@dataclass(frozen=True)
class NodeBinaries:
    """The directory ``test/node/build.sh`` prints: kubelet, containerd, runc, busybox, cni/."""

    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def cni_dir(self) -> Path:
        return (self.directory / "cni").resolve()

    def missing(self) -> list[str]:
        gone = [n for n in NODE_REQUIRED if not os.access(self.path(n), os.X_OK)]
        gone += [f"cni/{p}" for p in CNI_PLUGINS if not os.access(self.path("cni") / p, os.X_OK)]
        return gone


def find_node_binaries() -> tuple[NodeBinaries | None, str]:
    """The node binaries, or None and a sentence saying what is missing and how to build them."""
    hint = f"run test/node/build.sh (as root) and export {NODE_BIN_DIR_ENV}=<the directory it prints>"
    env = os.environ.get(NODE_BIN_DIR_ENV)
    directory: Path | None = Path(env) if env else None
    root = repo_root()
    if directory is None and root is not None and (root / "test" / "node" / "bin").exists():
        directory = (root / "test" / "node" / "bin").resolve()
    if directory is None:
        return None, f"real-node binaries not found: {hint}"
    bins = NodeBinaries(directory)
    missing = bins.missing()
    if missing:
        return None, f"real-node binaries missing in {directory}: {', '.join(missing)}; {hint}"
    return bins, ""


def node_unavailable_reason() -> str:
    """Why a real node cannot run here ("" when it can): root and the tools it calls."""
    if os.geteuid() != 0:
        return "a real node needs root (mount/network namespaces, cgroups, mknod)"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"a real node needs `{tool}` on PATH"
    if not Path("/sys/fs/cgroup/pids").is_dir():
        return "a real node needs the cgroup v1 pids hierarchy at /sys/fs/cgroup/pids"
    return ""
