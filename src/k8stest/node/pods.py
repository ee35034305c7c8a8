"""Pods on the node: a run-once workload pod and its log."""

from __future__ import annotations

from collections.abc import Mapping

from k8stest.kubeclient import JSON
from k8stest.node.running import RealNode
from k8stest.ociimage import WORKLOAD_IMAGE


def workload_pod(
    name: str,
    node_name: str,
    script: str,
    *,
    limits: Mapping[str, str] | None = None,
    host_paths: Mapping[str, str] | None = None,
    image: str = WORKLOAD_IMAGE,
) -> JSON:
    """A run-once busybox pod that the scheduler must place on ``node_name`` (by label, not by
    ``nodeName``, so the real scheduler decides). ``host_paths``: container path -> node path."""
    volumes = [
        {"name": f"host{i}", "hostPath": {"path": host}} for i, host in enumerate((host_paths or {}).values())
    ]
    mounts = [
        {"name": f"host{i}", "mountPath": path, "readOnly": True} for i, path in enumerate(host_paths or {})
    ]
    container: JSON = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "volumeMounts": mounts,
    }
    if limits:
        container["resources"] = {"limits": dict(limits)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            "volumes": volumes,
        },
    }


def pod_log(node: RealNode, namespace: str, name: str, container: str = "main") -> str:
    """The container's output as the kubelet stored it (CRI log format, prefixes removed)."""
    lines = []
    for log in sorted(node.layout.log_dir.glob(f"pods/{namespace}_{name}_*/{container}/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split(" ", 3)
            lines.append(parts[3] if len(parts) == 4 else line)
    return "\n".join(lines)
