"""The real node is ready for DRA drivers, shown without any driver.

- The DRA feature gates the project's drivers rely on are on in the API server, the scheduler,
  KCM and the kubelet (their defaults in 1.37; ``k8stest.node.dra.DRA_FEATURE_GATES``).
- The kubelet's plugin directories are where a DaemonSet's hostPath finds them.
- The whole chain up to the kubelet: a ResourceSlice published by hand for the node (a fake
  device of a driver that does not exist), a DeviceClass and a ResourceClaimTemplate. KCM
  generates the pod's claim, the scheduler allocates the fake device and binds the pod to the
  node, and the kubelet, asked to prepare the claim, reports that no driver of that name is
  registered. A second pod finds the device taken and stays Pending. Deleting the pods removes
  the generated claims.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node.dra import (
    DRA_FEATURE_GATES,
    KUBELET_DRA_FEATURE_GATES,
    claim_path,
    claim_template,
    component_feature_gates,
    created,
    device_class,
    pod_claim_names,
    resource_slice,
    wait_claim_allocated,
    wait_event,
    with_claims,
)
from k8stest.node.plugins import run_to_completion, unschedulable_message

pytestmark = pytest.mark.k8s

PODS = "/api/v1/namespaces/default/pods"
# A driver nobody runs: the kubelet must find no plugin for it.
FAKE_DRIVER = "fake.dra.k8stest.example.com"


@pytest.fixture
def pods(client: KubeClient) -> Iterator[list[str]]:
    """Names of pods a test created in ``default``; deleted (and waited for) afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        client.delete_if_present(f"{PODS}/{name}")
    for name in made:
        _wait_gone(client, f"{PODS}/{name}")


def _wait_gone(client: KubeClient, path: str, timeout: float = 60) -> None:
    def gone() -> bool:
        try:
            client.get(path)
        except ApiError as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(f"{path} deleted", gone, timeout=timeout)


def test_dra_feature_gates_are_on_in_every_component(
    real_node: RealNode, node_control_plane: ControlPlane, client: KubeClient
) -> None:
    gates = component_feature_gates(node_control_plane, client, real_node.name)
    missing = {
        component: [
            g
            for g in (KUBELET_DRA_FEATURE_GATES if component == "kubelet" else DRA_FEATURE_GATES)
            if not found.get(g)
        ]
        for component, found in gates.items()
    }
    assert not any(missing.values()), f"DRA feature gates off or unreported: {missing}"
    # The reading itself: every component reports some gate off, so "all on" is not a parse failure.
    assert all(False in found.values() for found in gates.values()), gates


def test_kubelet_plugin_directories_reach_a_pod_through_host_path(
    real_node: RealNode, client: KubeClient
) -> None:
    """A DRA driver's DaemonSet mounts both directories (type Directory: they must exist) and
    writes its sockets there; what a pod writes is in the kubelet's directories on the node."""
    marker = "k8stest-dra-harness"
    manifest = workload_pod(
        "plugin-dirs",
        real_node.name,
        f"set -e; mkdir -p /plugins/{marker}; echo pod > /plugins/{marker}/file;"
        f" echo pod > /registry/{marker}",
    )
    manifest["spec"]["volumes"] = [
        {"name": "registry", "hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": "Directory"}},
        {"name": "plugins", "hostPath": {"path": "/var/lib/kubelet/plugins", "type": "Directory"}},
    ]
    manifest["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "registry", "mountPath": "/registry"},
        {"name": "plugins", "mountPath": "/plugins"},
    ]
    written = [real_node.plugins_registry_dir / marker, real_node.plugins_dir / marker / "file"]
    try:
        pod, log = run_to_completion(client, real_node, manifest)
        assert pod["status"]["phase"] == "Succeeded", (pod["status"], log)
        for path in written:
            assert path.read_text() == "pod\n", path
    finally:
        for path in written:
            path.unlink(missing_ok=True)
        if (real_node.plugins_dir / marker).is_dir():
            (real_node.plugins_dir / marker).rmdir()


def _claim_pod(name: str, node: str, template: str) -> dict[str, Any]:
    return with_claims(workload_pod(name, node, "true"), {"dev": template})


def test_scheduler_allocates_a_hand_made_slice_and_the_kubelet_finds_no_driver(
    real_node: RealNode, client: KubeClient, pods: list[str]
) -> None:
    device = {
        "name": "dev0",
        "attributes": {"model": {"string": "fake"}},
        "capacity": {"memory": {"value": "1Gi"}},
    }
    objects = [
        resource_slice(f"{real_node.name}-fake", FAKE_DRIVER, real_node.name, [device]),
        device_class(FAKE_DRIVER, FAKE_DRIVER),
        claim_template(
            "fake-one", FAKE_DRIVER, selectors=[f'device.attributes["{FAKE_DRIVER}"].model == "fake"']
        ),
    ]
    with created(client, objects):
        client.create(PODS, _claim_pod("dra-first", real_node.name, "fake-one"))
        pods.append("dra-first")
        claim = wait_claim_allocated(client, "default", "dra-first", "dev")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (FAKE_DRIVER, real_node.name, "dev0")
        assert [r["name"] for r in claim["status"].get("reservedFor", [])] == ["dra-first"]
        # Bound by the scheduler, which picked the node from the slice's nodeName.
        assert client.get(f"{PODS}/dra-first")["spec"].get("nodeName") == real_node.name

        event = wait_event(client, "default", "dra-first", "FailedPrepareDynamicResources")
        assert f"DRA driver {FAKE_DRIVER} is not registered" in event["message"], event
        assert event["source"].get("component") == "kubelet", event
        pod = client.get(f"{PODS}/dra-first")
        assert pod["status"]["phase"] == "Pending", (
            pod["status"],
            pod_log(real_node, "default", "dra-first"),
        )

        # The device is not shareable (no allowMultipleAllocations) and taken: a second claim
        # from the same template cannot be allocated anywhere.
        client.create(PODS, _claim_pod("dra-second", real_node.name, "fake-one"))
        pods.append("dra-second")
        message = unschedulable_message(client, "dra-second")
        assert "cannot allocate all claims" in message, message

        generated = {
            name: pod_claim_names(client.get(f"{PODS}/{name}")) for name in ("dra-first", "dra-second")
        }
        assert all("dev" in claims for claims in generated.values()), generated
        for name in generated:
            client.delete(f"{PODS}/{name}")
        # KCM deletes a pod's generated claims once the pod is gone.
        for claims in generated.values():
            _wait_gone(client, claim_path("default", claims["dev"]))
