"""The control plane fixture: genuine apiserver/KCM/scheduler/kwok behaviour on loopback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from k8stest.binaries import Binaries
from k8stest.controlplane import ControlPlane, start_control_plane
from k8stest.devicemanager import DeviceManagerHarness
from k8stest.fakeplugin import FakeDevicePlugin, devices
from k8stest.gomod import required_version
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.kwok import wait_daemonset_ready
from k8stest.ports import EPHEMERAL_RANGE_FILE, parse_port_range
from k8stest.process import group_alive, port_is_listening

pytestmark = pytest.mark.k8s

GPU = "gpu.intel.com/i915"
EPHEMERAL = parse_port_range(EPHEMERAL_RANGE_FILE.read_text(), str(EPHEMERAL_RANGE_FILE))


def _go_mod_k8s_version() -> str:
    go_mod = Path(__file__).resolve().parents[2] / "test" / "k8s" / "go.mod"
    return required_version(go_mod.read_text(), "k8s.io/kubernetes")


def test_apiserver_reports_the_pinned_version(k8s_admin: KubeClient) -> None:
    assert k8s_admin.get("/version")["gitVersion"] == _go_mod_k8s_version()


def test_service_account_without_rights_is_denied(
    k8s_control_plane: ControlPlane, k8s_admin: KubeClient
) -> None:
    creds = k8s_control_plane.service_account_credentials("rbac-test", "nobody")
    sa = KubeClient(creds)
    try:
        with pytest.raises(ApiError) as denied:
            sa.get("/api/v1/namespaces/rbac-test/pods")
        assert denied.value.status == 403
        assert "system:serviceaccount:rbac-test:nobody" in str(denied.value)

        # The same identity is allowed once RBAC says so: the denial above was RBAC's decision.
        k8s_admin.apply_ok(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/rbac-test/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "nobody-view"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "rbac-test"}],
            },
        )
        pods = wait_for(
            "RoleBinding to take effect", lambda: sa.get("/api/v1/namespaces/rbac-test/pods"), timeout=10
        )
        assert pods["kind"] == "PodList"
        with pytest.raises(ApiError) as still_denied:
            sa.get("/api/v1/namespaces/kube-system/pods")
        assert still_denied.value.status == 403
    finally:
        sa.close()


def test_kubeconfig_files_work_with_kubectl(
    k8s_control_plane: ControlPlane,
    k8s_binaries: Binaries,
    service_account_kubeconfig: Callable[[str, str], Path],
) -> None:
    kubectl = str(k8s_binaries.path("kubectl"))
    admin = subprocess.run(
        [kubectl, "--kubeconfig", str(k8s_control_plane.admin_kubeconfig), "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "system:masters" in admin.stdout

    path = service_account_kubeconfig("kc-test", "reader")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    denied = subprocess.run(
        [kubectl, "--kubeconfig", str(path), "get", "pods"], capture_output=True, text=True, timeout=30
    )
    assert denied.returncode != 0
    assert 'User "system:serviceaccount:kc-test:reader" cannot list resource "pods"' in denied.stderr


def _daemonset(name: str, node_selector: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "containers": [{"name": "plugin", "image": "intel/intel-gpu-plugin:devel"}],
                },
            },
        },
    }


def test_daemonset_pods_become_ready_on_kwok_nodes(
    k8s_admin: KubeClient, kwok_nodes: Callable[..., list[str]]
) -> None:
    kwok_nodes(3, labels={"ds-test": "yes"})
    k8s_admin.create("/apis/apps/v1/namespaces/default/daemonsets", _daemonset("ds-test", {"ds-test": "yes"}))
    try:
        ds = wait_daemonset_ready(k8s_admin, "default", "ds-test", expected=3, timeout=120)
        assert ds["status"]["numberAvailable"] == 3
        pods = k8s_admin.get("/api/v1/namespaces/default/pods?labelSelector=app%3Dds-test")["items"]
        assert len(pods) == 3
        assert all(p["status"]["phase"] == "Running" for p in pods)
    finally:
        k8s_admin.delete("/apis/apps/v1/namespaces/default/daemonsets/ds-test")


def test_daemonset_on_100_kwok_nodes(k8s_admin: KubeClient, kwok_nodes: Callable[..., list[str]]) -> None:
    kwok_nodes(100, labels={"ds-scale": "yes"})
    k8s_admin.create(
        "/apis/apps/v1/namespaces/default/daemonsets", _daemonset("ds-scale", {"ds-scale": "yes"})
    )
    try:
        ds = wait_daemonset_ready(k8s_admin, "default", "ds-scale", expected=100, timeout=180)
        assert ds["status"]["numberAvailable"] == 100
    finally:
        k8s_admin.delete("/apis/apps/v1/namespaces/default/daemonsets/ds-scale")


def _gpu_pod(name: str, node: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "app", "image": "busybox", "resources": {"limits": {GPU: str(count)}}}],
        },
    }


def test_kwok_node_shows_harness_capacity_and_gpu_pod_is_scheduled(
    k8s_admin: KubeClient, node_device_manager: DeviceManagerHarness
) -> None:
    node = node_device_manager.node_name
    assert node is not None
    with FakeDevicePlugin(node_device_manager.device_plugin_dir, GPU, devices(2, prefix="card")):
        node_device_manager.wait_resource(GPU, capacity=2, allocatable=2)

        def published() -> dict[str, Any] | None:
            st = k8s_admin.get(f"/api/v1/nodes/{node}")["status"]
            ok = st.get("capacity", {}).get(GPU) == "2" and st.get("allocatable", {}).get(GPU) == "2"
            return st if ok else None

        status = wait_for(f"{GPU} on node {node}", published, timeout=30)
        assert status["allocatable"]["pods"]  # kwok's defaults survived the merge

        k8s_admin.create("/api/v1/namespaces/default/pods", _gpu_pod("gpu-fits", node, 1))
        k8s_admin.create("/api/v1/namespaces/default/pods", _gpu_pod("gpu-too-big", node, 3))
        try:
            pod = wait_for(
                "gpu-fits Running on the kwok node",
                lambda: (
                    p
                    if (p := k8s_admin.get("/api/v1/namespaces/default/pods/gpu-fits"))["status"].get("phase")
                    == "Running"
                    else None
                ),
                timeout=60,
            )
            assert pod["spec"]["nodeName"] == node

            def unschedulable() -> str | None:
                p = k8s_admin.get("/api/v1/namespaces/default/pods/gpu-too-big")
                for c in p["status"].get("conditions", []):
                    if c["type"] == "PodScheduled" and c["status"] == "False":
                        return str(c.get("message", ""))
                return None

            message = wait_for("gpu-too-big to be unschedulable", unschedulable, timeout=60)
            assert f"Insufficient {GPU}" in message
        finally:
            for name in ("gpu-fits", "gpu-too-big"):
                k8s_admin.delete(f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")

    # The plugin is gone: the kubelet keeps the capacity for its grace period but nothing is allocatable.
    def drained() -> bool:
        st = k8s_admin.get(f"/api/v1/nodes/{node}")["status"]
        return bool(st["allocatable"].get(GPU) == "0" and st["capacity"].get(GPU) == "2")

    wait_for(f"{GPU} allocatable 0 on {node}", drained, timeout=30)


def test_teardown_leaves_no_process_or_port(k8s_binaries: Binaries, tmp_path: Path) -> None:
    cp = start_control_plane(k8s_binaries, tmp_path / "cp")
    try:
        pgids = [os.getpgid(p.pid) for p in cp.processes]
        ports = cp.ports.all()
        assert [p.name for p in cp.processes] == [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ]
        assert port_is_listening(cp.ports.apiserver)
        assert all(r.held for r in cp.reserved_ports)
    finally:
        cp.stop()
    assert not [pg for pg in pgids if group_alive(pg)]
    assert not [port for port in ports if port_is_listening(port)]
    assert not [r.port for r in cp.reserved_ports if r.held], "ports not given back"
    assert all(port < EPHEMERAL.start or port >= EPHEMERAL.stop for port in ports)
