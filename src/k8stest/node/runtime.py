"""The real node's OCI runtime: runc, with each container's /sys taken from the node.

Why: runc gives a container a fresh kernel sysfs at /sys, and the kernel knows nothing of the
simulated devices, so on a machine without GPUs ``/sys/class/drm`` does not exist there. A
DaemonSet that mounts the host's ``/sys/class/drm`` then fails with "mkdir …/sys/class/drm:
read-only file system". On real hardware the path exists. Binding the node's own /sys (the
simulation merged with the host's sysfs, see :mod:`k8stest.node`) in place of the fresh sysfs gives
containers the view they get on hardware. The mount keeps the options runc would have used
(read-only unless the container is privileged).

containerd calls a small shell script (written by ``start_real_node``) that runs this module only
for ``create``; every other runc call goes to runc directly.

Usage: ``python k8stest/node/runtime.py <runc> <runc arguments…>``
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def with_node_sysfs(spec: dict[str, Any]) -> dict[str, Any]:
    """The OCI spec with its sysfs mount at /sys replaced by a recursive bind of the node's /sys."""
    mounts = []
    for mount in spec.get("mounts", []):
        if mount.get("destination") == "/sys" and mount.get("type") == "sysfs":
            options = [o for o in mount.get("options", []) if o in ("ro", "rw", "nosuid", "noexec", "nodev")]
            mount = {"destination": "/sys", "type": "bind", "source": "/sys", "options": ["rbind", *options]}
        mounts.append(mount)
    return {**spec, "mounts": mounts}


def bundle_dir(args: list[str]) -> Path:
    """The ``--bundle``/``-b`` argument of a runc command line (runc's default: the cwd)."""
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--bundle="):
            return Path(arg.split("=", 1)[1])
    return Path.cwd()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    runc, args = argv[1], argv[2:]
    if "create" in args:
        config = bundle_dir(args) / "config.json"
        spec = json.loads(config.read_text())
        config.write_text(json.dumps(with_node_sysfs(spec)))
    os.execv(runc, [runc, *args])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
