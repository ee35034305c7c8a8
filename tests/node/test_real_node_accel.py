"""This project's node image on the real node, for QAT, SGX and DSA: the DaemonSets the operator
builds for the QatDevicePlugin, SgxDevicePlugin and DsaDevicePlugin samples run under containerd,
register on the real kubelet, and pods asking for the resources get the simulated devices.

The node's simulated hardware is ``k8stest.node.fixtures.NODE_PROFILE``: two QAT 4xxx PFs (one
``sym;asym``, one ``dc``) with two VFs each bound to vfio-pci, SGX with 256 MiB of EPC, and one DSA
whose work queue 0 is dedicated and queue 1 shared. The three DaemonSets are created together
(their pods start in parallel) and deleted at the end of the module. ``sgx.intel.com/epc`` comes
from ``sgx_epchook -register`` in a pod of its own, started alongside them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import pytest

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.plugins.sgx import epchook
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log, workload_pod
from k8stest.node.plugins import (
    PLUGIN_NAMESPACE,
    SamplePlugin,
    run_to_completion,
    sample_plugin,
    unschedulable_message,
)

pytestmark = pytest.mark.k8s

# What the plugins must advertise for NODE_PROFILE.
QAT_CY, QAT_DC = "qat.intel.com/cy", "qat.intel.com/dc"
QAT_VFS = {QAT_CY: 2, QAT_DC: 2}  # services of each PF -> its VFs on vfio-pci
SGX_ENCLAVE, SGX_PROVISION, SGX_EPC = "sgx.intel.com/enclave", "sgx.intel.com/provision", epchook.EPC_RESOURCE
EPC, EPC_BYTES = "256Mi", 268435456  # epc_bytes_per_node on the profile's single NUMA node
DSA_DEDICATED, DSA_SHARED = "dsa.intel.com/wq-user-dedicated", "dsa.intel.com/wq-user-shared"
DSA_QUEUES = {DSA_DEDICATED: "wq0.0", DSA_SHARED: "wq0.1"}

EPCHOOK_ACCOUNT = "sgx-epchook"
EPCHOOK_ROLE = "k8stest-sgx-epchook"
EPCHOOK_POD = "sgx-epchook-register"
EPCHOOK_PODS = f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods"


@pytest.fixture(scope="module")
def accel_plugins(
    real_node: RealNode, node_image: str, node_control_plane: ControlPlane, epchook_started: str
) -> Iterator[Mapping[DeviceKind, SamplePlugin]]:
    """The operator's DaemonSets for the QAT, SGX and DSA samples, created at once on the real node.

    QAT's sample caps the plugin at ``maxNumDevices: 1``; the CR here raises it to the simulated
    VF count, so every VF is advertised. The ``sgx_epchook`` pod (``epchook_started``) is created
    just before, so it runs while the plugin pods start.
    """
    client = node_control_plane.client()
    try:
        with ExitStack() as stack:
            plugins = {
                DeviceKind.QAT: stack.enter_context(
                    sample_plugin(
                        client, real_node, DeviceKind.QAT, node_image, maxNumDevices=sum(QAT_VFS.values())
                    )
                ),
                DeviceKind.SGX: stack.enter_context(
                    sample_plugin(client, real_node, DeviceKind.SGX, node_image)
                ),
                DeviceKind.DSA: stack.enter_context(
                    sample_plugin(client, real_node, DeviceKind.DSA, node_image)
                ),
            }
            yield plugins
    finally:
        client.close()


def qat_expected() -> dict[str, str]:
    return {resource: str(count) for resource, count in QAT_VFS.items()}


def sgx_expected(plugin: SamplePlugin) -> dict[str, str]:
    return {
        SGX_ENCLAVE: str(plugin.spec["enclaveLimit"]),
        SGX_PROVISION: str(plugin.spec["provisionLimit"]),
    }


def dsa_expected(plugin: SamplePlugin) -> dict[str, str]:
    return {DSA_DEDICATED: "1", DSA_SHARED: str(plugin.spec["sharedDevNum"])}


def epchook_pod(image: str, node_name: str) -> dict[str, Any]:
    """``sgx_epchook -register`` as a run-once pod on ``node_name``, from the node image.

    deploy/ ships no manifest that runs the hook with ``-register`` (the operator's SGX init
    container installs it as an NFD hook instead), so this is the smallest pod that does: the
    service account's token, the node's name from the downward API, and the container's own
    ``/sys`` (the node's, as on hardware), where the hook finds ``sgx_total_bytes``. It needs no
    host path, no device and no privilege, so it runs as nobody with a read-only root.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": EPCHOOK_POD, "labels": {"app": EPCHOOK_POD}},
        "spec": {
            "serviceAccountName": EPCHOOK_ACCOUNT,
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "epchook",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sgx_epchook", "-register"],
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "runAsGroup": 65534,
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }


def remove_epc_capacity(client: KubeClient, node_name: str) -> None:
    try:
        client.request(
            "PATCH",
            f"/api/v1/nodes/{node_name}/status",
            [{"op": "remove", "path": "/status/capacity/sgx.intel.com~1epc"}],
            content_type="application/json-patch+json",
        )
    except ApiError as e:
        if e.status != 422:  # nothing to remove
            raise


@pytest.fixture(scope="module")
def epchook_started(real_node: RealNode, node_image: str, node_control_plane: ControlPlane) -> Iterator[str]:
    """The ``sgx_epchook -register`` pod created on the real node (not waited for); its name.

    Its ServiceAccount's only right is patching ``nodes/status``. Any EPC capacity is removed
    first, so what the tests see afterwards is the pod's doing; it is removed again at the end.
    """
    client = node_control_plane.client()
    rbac = "rbac.authorization.k8s.io/v1"
    role_path, binding_path = f"/apis/{rbac}/clusterroles", f"/apis/{rbac}/clusterrolebindings"
    account_path = f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/serviceaccounts"
    client.apply_ok(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
    )
    client.apply_ok(
        account_path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": EPCHOOK_ACCOUNT}}
    )
    client.apply_ok(
        role_path,
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": EPCHOOK_ROLE},
            "rules": [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}],
        },
    )
    client.apply_ok(
        binding_path,
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": EPCHOOK_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EPCHOOK_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": EPCHOOK_ACCOUNT, "namespace": PLUGIN_NAMESPACE}],
        },
    )
    remove_epc_capacity(client, real_node.name)
    client.create(EPCHOOK_PODS, epchook_pod(node_image, real_node.name))
    try:
        yield EPCHOOK_POD
    finally:
        client.delete(f"{EPCHOOK_PODS}/{EPCHOOK_POD}")
        remove_epc_capacity(client, real_node.name)
        for path in (
            f"{binding_path}/{EPCHOOK_ROLE}",
            f"{role_path}/{EPCHOOK_ROLE}",
            f"{account_path}/{EPCHOOK_ACCOUNT}",
        ):
            client.delete(path)
        client.close()


@pytest.fixture(scope="module")
def epc_capacity(
    real_node: RealNode, node_image: str, epchook_started: str, node_control_plane: ControlPlane
) -> str:
    """``sgx_epchook -register`` in a pod on the real node: EPC as node capacity, as on a cluster.

    The pod from the project's node image reaches the API server through the ``kubernetes``
    Service and reads the simulated ``sgx_total_bytes`` from the node's ``/sys``. If it fails, the
    test fails with its state and log.
    """
    pod_path = f"{EPCHOOK_PODS}/{epchook_started}"
    pod_name = f"{PLUGIN_NAMESPACE}/{epchook_started}"
    what = f"sgx_epchook -register (pod {pod_name} from {node_image}) on {real_node.name}"

    def finished() -> dict[str, Any] | None:
        pod = client.get(pod_path)
        return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

    client = node_control_plane.client()
    try:
        pod = wait_for(f"{what} to finish", finished, timeout=60)
    except TimeoutError as error:
        status = client.get(pod_path).get("status")
        raise AssertionError(f"{error}: {status}\n{epchook_log(real_node)}") from None
    finally:
        client.close()
    log = epchook_log(real_node)
    states = [c.get("state") for c in pod["status"].get("containerStatuses", [])]
    assert pod["status"]["phase"] == "Succeeded", f"{what} failed: {states}\n{log}"
    # The size must come from the node's /sys (not from a cpuid device, nor "nowhere" as 0).
    source = f"{epchook.NODE_SYSFS}/node*/x86/sgx_total_bytes"
    assert f"EPC size {EPC_BYTES} bytes, read from {source}" in log, (
        f"{what} did not read the simulated {EPC_BYTES} bytes from {source} in the node's /sys:\n{log}"
    )
    return EPC


def epchook_log(node: RealNode) -> str:
    return pod_log(node, PLUGIN_NAMESPACE, EPCHOOK_POD, "epchook") or "(the pod wrote no log)"


def test_qat_plugin_serves_vfio_groups_and_qat_env_to_a_pod(
    accel_plugins: Mapping[DeviceKind, SamplePlugin], client: KubeClient
) -> None:
    """DPDK mode: one cy VF is its /dev/vfio/<group> plus /dev/vfio/vfio, and QAT0 names the VF."""
    plugin = accel_plugins[DeviceKind.QAT]
    node = plugin.node
    plugin.wait_advertised(client, qat_expected())
    capacity = client.get(f"/api/v1/nodes/{node.name}")["status"]["capacity"]
    assert {r: capacity.get(r) for r in QAT_VFS} == qat_expected()
    script = (
        'set -e; env | grep \'^QAT\'; test -n "$QAT0"; test -z "$QAT1";'
        " groups=$(ls /dev/vfio | grep -v '^vfio$'); echo groups=$groups;"
        " test $(ls /dev/vfio | grep -vc '^vfio$') -eq 1; test -c /dev/vfio/vfio; test -c /dev/vfio/$groups;"
        " vf=/sys/bus/pci/devices/$QAT0; test -d $vf/iommu_group; group=$(readlink $vf/iommu_group);"
        ' echo iommu_group=${group##*/}; test "${group##*/}" = "$groups";'
        " echo services=$(cat $vf/physfn/qat/cfg_services)"
    )
    pod, log = run_to_completion(
        client, node, workload_pod("one-qat", node.name, script, limits={QAT_CY: "1"})
    )
    assert pod["status"]["phase"] == "Succeeded", f"one-qat on {node.name} failed:\n{log}"
    assert "QAT0=0000:" in log, log
    assert "services=sym;asym" in log, log  # a VF of the crypto PF, as cy promises


def test_sgx_plugin_serves_enclave_and_provision_with_epc_from_node_capacity(
    accel_plugins: Mapping[DeviceKind, SamplePlugin], epc_capacity: str, client: KubeClient
) -> None:
    """enclave + provision from the plugin, EPC as node capacity registered by sgx_epchook."""
    plugin = accel_plugins[DeviceKind.SGX]
    node = plugin.node
    plugin.wait_advertised(client, {**sgx_expected(plugin), SGX_EPC: epc_capacity})
    # The plugin hands out exactly the two driver nodes (no /dev/sgx/ directory).
    script = (
        "set -e; ls /dev | grep sgx; test -c /dev/sgx_enclave; test -c /dev/sgx_provision; test ! -e /dev/sgx"
    )
    limits = {SGX_ENCLAVE: "1", SGX_PROVISION: "1", SGX_EPC: "64Mi"}
    pod, log = run_to_completion(client, node, workload_pod("one-sgx", node.name, script, limits=limits))
    assert pod["status"]["phase"] == "Succeeded", f"one-sgx on {node.name} failed:\n{log}"
    assert log.split() == ["sgx_enclave", "sgx_provision"], log


def test_dsa_plugin_serves_one_dedicated_work_queue_to_a_pod(
    accel_plugins: Mapping[DeviceKind, SamplePlugin], client: KubeClient
) -> None:
    plugin = accel_plugins[DeviceKind.DSA]
    node = plugin.node
    plugin.wait_advertised(client, dsa_expected(plugin))
    queue = DSA_QUEUES[DSA_DEDICATED]
    script = (
        f"set -e; ls /dev/dsa; test $(ls /dev/dsa | wc -l) -eq 1; test -c /dev/dsa/{queue};"
        " for c in /dev/char/*; do test -c $c; echo char=$c; done"
    )
    limits = {DSA_DEDICATED: "1"}
    pod, log = run_to_completion(client, node, workload_pod("one-dsa-wq", node.name, script, limits=limits))
    assert pod["status"]["phase"] == "Succeeded", f"one-dsa-wq on {node.name} failed:\n{log}"
    assert log.splitlines()[0] == queue, log
    # The queue's /dev/char/<major>:<minor> entry comes with it, as udev names it on the node.
    assert log.count("char=/dev/char/") == 1, log


def test_pod_asking_for_more_accelerators_than_the_node_has_stays_pending(
    accel_plugins: Mapping[DeviceKind, SamplePlugin], epc_capacity: str, client: KubeClient
) -> None:
    """One pod over every limit: the scheduler names each resource the node lacks."""
    node = accel_plugins[DeviceKind.QAT].node
    for kind, expected in (
        (DeviceKind.QAT, qat_expected()),
        (DeviceKind.DSA, dsa_expected(accel_plugins[DeviceKind.DSA])),
    ):
        accel_plugins[kind].wait_advertised(client, expected)
    accel_plugins[DeviceKind.SGX].wait_advertised(client, {SGX_EPC: epc_capacity})
    too_many = {QAT_CY: str(QAT_VFS[QAT_CY] + 1), DSA_DEDICATED: "2", SGX_EPC: "512Mi"}
    client.create(
        "/api/v1/namespaces/default/pods",
        workload_pod("too-many-accelerators", node.name, "true", limits=too_many),
    )
    try:
        message = unschedulable_message(client, "too-many-accelerators")
        missing = [resource for resource in too_many if f"Insufficient {resource}" not in message]
        assert not missing, f"the scheduler's message names no shortage of {missing}: {message}"
        pod = client.get("/api/v1/namespaces/default/pods/too-many-accelerators")
        assert pod["status"]["phase"] == "Pending"
    finally:
        client.delete("/api/v1/namespaces/default/pods/too-many-accelerators")
