"""A real kubelet node on the test control plane: pods are scheduled, started by containerd and
see the simulated node's devices.

One node serves the whole module (it starts in a few seconds, but every test starting its own
would multiply the tier's cost); tests use their own pod names and clean up after themselves.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from k8stest.binaries import Binaries
from k8stest.controlplane import ControlPlane
from k8stest.fakeplugin import AllocationSpec, FakeDevicePlugin, devices
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import (
    SIM_DEVICE_MAJOR,
    NodeBinaries,
    NodeConfig,
    RealNode,
    pod_log,
    start_real_node,
    workload_pod,
)
from k8stest.node.plugins import unschedulable_message

pytestmark = pytest.mark.k8s

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def pods(client: KubeClient) -> Iterator[list[str]]:
    """Names of pods a test created; deleted (and waited for) afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        client.delete_if_present(f"{PODS}/{name}")
    for name in created:

        def gone(name: str = name) -> bool:
            try:
                client.get(f"{PODS}/{name}")
            except ApiError as e:
                if e.status == 404:
                    return True
                raise
            return False

        wait_for(f"pod {name} deleted", gone, timeout=60)


def run_pod(
    client: KubeClient, pods: list[str], manifest: dict[str, Any], timeout: float = 60
) -> dict[str, Any]:
    """Create a run-once pod and wait until it Succeeded or Failed; returns the final pod."""
    client.create(PODS, manifest)
    name = manifest["metadata"]["name"]
    pods.append(name)

    def finished() -> dict[str, Any] | None:
        pod = client.get(f"{PODS}/{name}")
        return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    return wait_for(f"pod {name} to finish", finished, timeout=timeout)


def test_node_registers_ready_with_its_identity(real_node: RealNode, client: KubeClient) -> None:
    node = client.get(f"/api/v1/nodes/{real_node.name}")
    info = node["status"]["nodeInfo"]
    # The kubelet is built from the control plane's release (test/k8s/hack/pin-kubernetes.sh).
    assert info["kubeletVersion"] == client.get("/version")["gitVersion"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info["containerRuntimeVersion"]
    # containerd 2 answers the CRI RuntimeConfig call, so the kubelet's configuration names no driver.
    kubelet_log = (real_node.layout.logs / "kubelet.log").read_text(errors="replace")
    assert 'received from the CRI runtime" cgroupDriver="cgroupfs"' in kubelet_log, real_node.log_tail(
        "kubelet"
    )
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", ready
    assert node["status"]["capacity"]["pods"] == "30"
    # The node's own address in its network namespace, as --node-ip set it.
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == NodeConfig().node_ip
    assert not node["spec"].get("taints")
    assert real_node.started_in > 0


def test_kubelet_has_a_node_identity_and_no_more(
    real_node: RealNode, k8s_binaries: Binaries, node_control_plane: ControlPlane
) -> None:
    """The kubelet's certificate makes it system:node:<name>: it may read its Node, not Secrets."""
    kubectl = [
        str(k8s_binaries.path("kubectl")),
        f"--kubeconfig={real_node.workdir / 'kubelet.kubeconfig'}",
        # The kubeconfig names the kubernetes Service, which only exists inside the node.
        f"--server={node_control_plane.server}",
    ]
    own = subprocess.run(
        [*kubectl, "get", "node", real_node.name, "-o", "name"], capture_output=True, text=True
    )
    assert own.returncode == 0, own.stderr
    secrets = subprocess.run([*kubectl, "get", "secrets", "-A"], capture_output=True, text=True)
    assert secrets.returncode != 0
    assert f'User "system:node:{real_node.name}" cannot list resource "secrets"' in secrets.stderr


def test_pod_is_scheduled_started_and_succeeds(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    script = "echo hello from $(hostname); test -s /var/run/secrets/kubernetes.io/serviceaccount/token"
    pod = run_pod(client, pods, workload_pod("hello", real_node.name, script))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert pod["spec"]["nodeName"] == real_node.name  # chosen by the scheduler from the selector
    assert pod["status"]["podIP"].startswith("10.88.0.")  # the node's CNI bridge
    assert "hello from hello" in pod_log(real_node, "default", "hello")


def test_pod_reaches_another_pod_through_its_service(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    """A ClusterIP Service with a ready endpoint forwards to it; without one it refuses."""
    server = workload_pod("echo-server", real_node.name, "while true; do echo pong | nc -l -p 8080; done")
    server["metadata"]["labels"] = {"app": "echo-server"}
    server["spec"]["restartPolicy"] = "Always"
    server["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    client.create(PODS, server)
    pods.append("echo-server")
    services = "/api/v1/namespaces/default/services"
    svc = client.create(
        services,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo"},
            "spec": {"selector": {"app": "echo-server"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    )
    try:
        ip = svc["spec"]["clusterIP"]
        script = (
            f'for i in $(seq 50); do out=$(nc {ip} 80 </dev/null) && test "$out" = pong && exit 0;'
            " sleep 0.2; done; exit 1"
        )
        pod = run_pod(client, pods, workload_pod("echo-client", real_node.name, script))
        assert pod["status"]["phase"] == "Succeeded", pod_log(real_node, "default", "echo-client")
    finally:
        client.delete(f"{services}/echo")


def test_failing_command_fails_the_pod_with_its_exit_code(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    pod = run_pod(client, pods, workload_pod("fails", real_node.name, "exit 3"))
    assert pod["status"]["phase"] == "Failed"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3


def test_simulated_devices_appear_where_hardware_does(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    """hostPath /dev/dri and /sys/class/drm inside the node are the simulation's, as char devices."""
    script = (
        "set -e; test -c /host/dev/dri/card0; test -c /host/dev/dri/renderD130; test -c /host/dev/mei0;"
        " test -e /host/dev/dri/by-path; ls /host/sys/class/drm; readlink /host/sys/class/drm/card2"
    )
    manifest = workload_pod(
        "devices",
        real_node.name,
        script,
        host_paths={"/host/dev": "/dev", "/host/sys/class/drm": "/sys/class/drm"},
    )
    pod = run_pod(client, pods, manifest)
    log = pod_log(real_node, "default", "devices")
    assert pod["status"]["phase"] == "Succeeded", log
    assert {"card0", "card1", "card2", "renderD128"} <= set(log.split())
    simulated = (real_node.dev_dir / "dri" / "card0").stat()
    assert stat.S_ISCHR(simulated.st_mode) and os.major(simulated.st_rdev) == SIM_DEVICE_MAJOR
    # The node's mounts stay in its namespace: the machine's /dev and /sys are not the simulation's.
    host_card = Path("/dev/dri/card0")
    assert not host_card.exists() or host_card.stat().st_rdev != simulated.st_rdev
    assert not Path("/sys/class/drm/card0").is_symlink() or "0000:10:" not in os.readlink(
        "/sys/class/drm/card0"
    )


def test_fake_device_plugin_hands_a_device_node_to_a_pod(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    """A device plugin registered on the real kubelet: capacity, scheduling, Allocate, runc."""
    resource = "example.com/fakedev"
    for i in range(2):
        real_node.add_device(f"fakedev{i}", minor=100 + i)
    plugin = FakeDevicePlugin(
        real_node.device_plugin_dir,
        resource,
        devices(2, prefix=""),
        allocation=AllocationSpec(dev_prefix="/dev/fakedev", env_name="FAKEDEV", cdi_kind=None),
    )
    with plugin:

        def capacity() -> bool:
            status = client.get(f"/api/v1/nodes/{real_node.name}")["status"]
            return bool(status["allocatable"].get(resource) == "2")

        wait_for(f"{resource} allocatable on {real_node.name}", capacity, timeout=30)

        script = "set -e; echo devices=$FAKEDEV; for d in /dev/fakedev*; do stat -c '%n %F %t %T' $d; done"
        pod = run_pod(client, pods, workload_pod("wants-one", real_node.name, script, limits={resource: "1"}))
        log = pod_log(real_node, "default", "wants-one")
        assert pod["status"]["phase"] == "Succeeded", log
        (device_id,) = plugin.allocations[-1][0]
        assert f"devices={device_id}" in log
        # Exactly the allocated device, as a character device with the node's numbers (hex).
        lines = [line for line in log.splitlines() if line.startswith("/dev/fakedev")]
        assert lines == [
            f"/dev/fakedev{device_id} character special file {SIM_DEVICE_MAJOR:x} {100 + int(device_id):x}"
        ]

        client.create(PODS, workload_pod("wants-three", real_node.name, "true", limits={resource: "3"}))
        pods.append("wants-three")

        message = unschedulable_message(client, "wants-three")
        assert f"Insufficient {resource}" in message
        assert client.get(f"{PODS}/wants-three")["status"]["phase"] == "Pending"


def test_a_second_node_starts_and_stops_without_leftovers(
    node_binaries: NodeBinaries,
    node_control_plane: ControlPlane,
    node_images: Path,
    tmp_path: Path,
    client: KubeClient,
) -> None:
    """Start/stop cost of a node and its cleanup: no process, cgroup or Node object left behind."""
    node = start_real_node(
        node_binaries,
        node_control_plane,
        tmp_path / "node",
        NodeConfig(name="k8stest-node-b"),
        images=[node_images],
    )
    cgroups = [h / node.layout.cgroup.lstrip("/") for h in node.hierarchies]
    try:
        assert all(c.is_dir() for c in cgroups)
    finally:
        node.stop()
    client.delete(f"/api/v1/nodes/{node.name}")
    assert not node.process.alive()
    assert not any(c.exists() for c in cgroups)  # rmdir succeeds only on empty cgroups
    assert node.started_in < 60
