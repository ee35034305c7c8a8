"""The project's plugin images on a real node: where the image archive is, and the DaemonSet the
operator builds for a sample CR.

Why build the DaemonSet with the operator's own function rather than run the operator: the
plugin side (image, command, host paths, security context) is then exactly what the operator
writes, while the test needs no operator pod, which cannot reach the API server from the node's
network yet (docs/node.md).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from k8stest.binaries import repo_root
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.node import RealNode, pod_log
from k8stest.pytest_plugin import _unavailable

__all__ = [
    "PLUGIN_NAMESPACE",
    "SamplePlugin",
    "create_plugin_identity",
    "delete_plugin_identity",
    "node_image",
    "node_image_archive",
    "plugin_identity",
    "registrations",
    "run_to_completion",
    "sample_daemonset",
    "sample_plugin",
    "unschedulable_message",
    "warning_events",
]

IMAGES_CACHE_ENV = "IMAGES_CACHE"
PLUGIN_NAMESPACE = "inteldeviceplugins-system"
SAMPLES = Path("deploy/operator/samples")
# What the operator's kustomization (deploy/operator/default) puts before every name it ships.
INSTALL_NAME_PREFIX = "intel-deviceplugins-"
# The ServiceAccount and RBAC the operator's install ships for FPGA plugin pods (the plugin reads
# its node's mode annotation); the manager names the account in FPGA_PLUGIN_SERVICE_ACCOUNT.
FPGA_PLUGIN_RBAC = Path("deploy/operator/rbac/fpga_plugin.yaml")
PODS = "/api/v1/namespaces/default/pods"


def image_archive(target: str) -> Path | None:
    """The newest ``<target>-*.oci.tar`` (``node`` or ``operator``) that ``make images``
    (tools/images/build.py) left in its cache (same lookup: ``IMAGES_CACHE``, else
    ``$XDG_CACHE_HOME`` or ~/.cache), if any."""
    xdg_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cache = os.environ.get(IMAGES_CACHE_ENV) or os.path.join(xdg_cache, "intel-device-plugins", "images")
    archives = sorted(glob.glob(f"{cache}/{target}-*.oci.tar"), key=os.path.getmtime)
    return Path(archives[-1]) if archives else None


def node_image_archive() -> Path | None:
    return image_archive("node")


@pytest.fixture(scope="session")
def node_image(real_node: RealNode) -> str:
    """The project's node image, imported into the session's real node once; its qualified name."""
    archive = node_image_archive()
    if archive is None:
        _unavailable("no node image archive (node-*.oci.tar): run `make images`")
    assert archive is not None
    names = real_node.import_images(archive)
    assert len(names) == 1, names
    return names[0]


def _deploy_root() -> Path:
    root = repo_root()
    if root is None:
        raise FileNotFoundError("the repository's deploy/ directory (k8stest runs from a checkout)")
    return root


def plugin_identity(kind: DeviceKind, namespace: str = PLUGIN_NAMESPACE) -> list[dict[str, Any]]:
    """The objects the operator's install ships for ``kind``'s plugin pods, named and placed as
    ``deploy/operator/default`` does (name prefix, ``namespace``): for FPGA its ServiceAccount,
    ClusterRole and ClusterRoleBinding; nothing for the other kinds."""
    if kind is not DeviceKind.FPGA:
        return []
    objects = [doc for doc in yaml.safe_load_all((_deploy_root() / FPGA_PLUGIN_RBAC).read_text()) if doc]
    for obj in objects:
        obj["metadata"]["name"] = INSTALL_NAME_PREFIX + obj["metadata"]["name"]
        if obj["kind"] == "ServiceAccount":
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] == "ClusterRoleBinding":
            obj["roleRef"]["name"] = INSTALL_NAME_PREFIX + obj["roleRef"]["name"]
            for subject in obj["subjects"]:
                subject["name"] = INSTALL_NAME_PREFIX + subject["name"]
                subject["namespace"] = namespace
    return objects


def _identity_path(obj: Mapping[str, Any]) -> str:
    """The collection an object of :func:`plugin_identity` is created in."""
    if obj["kind"] == "ServiceAccount":
        return f"/api/v1/namespaces/{obj['metadata']['namespace']}/serviceaccounts"
    return f"/apis/rbac.authorization.k8s.io/v1/{obj['kind'].lower()}s"


def create_plugin_identity(client: KubeClient, objects: Sequence[Mapping[str, Any]]) -> None:
    for obj in objects:
        client.apply_ok(_identity_path(obj), obj)


def delete_plugin_identity(client: KubeClient, objects: Sequence[Mapping[str, Any]]) -> None:
    for obj in reversed(objects):
        client.delete_if_present(f"{_identity_path(obj)}/{obj['metadata']['name']}")


def sample_daemonset(
    kind: DeviceKind, image: str, namespace: str = PLUGIN_NAMESPACE, **changes: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sample CR's spec with ``image``, the operator's DaemonSet for it).

    ``changes`` are further spec fields (CR names, e.g. ``maxNumDevices``) that replace the
    sample's. A sample's ``initImage`` becomes ``image`` too: the samples name the node image
    unqualified, which a node resolves to a public registry (docs/node.md, "Images"). FPGA pods
    get the ServiceAccount of :func:`plugin_identity`, as the installed operator gives them.

    The owner reference is dropped: no CR object exists, and the garbage collector would delete a
    DaemonSet whose owner is missing.
    """
    sample = yaml.safe_load(
        (_deploy_root() / SAMPLES / f"deviceplugin_v1_{kind.value}deviceplugin.yaml").read_text()
    )
    spec = {**sample["spec"], **changes, "image": image}
    if "initImage" in sample["spec"] and "initImage" not in changes:
        spec["initImage"] = image
    accounts = [
        o["metadata"]["name"] for o in plugin_identity(kind, namespace) if o["kind"] == "ServiceAccount"
    ]
    ds = desired_daemonset(
        parse_spec(kind, spec),
        Owner(kind, sample["metadata"]["name"], "uid"),
        namespace,
        fpga_service_account=accounts[0] if accounts else "",
    )
    del ds["metadata"]["ownerReferences"]
    return spec, ds


def registrations(node: RealNode, resource: str) -> int:
    """How often the node's kubelet (any run of it) accepted a plugin's registration of ``resource``."""
    line = f'"Got registration request from device plugin with resource" resourceName="{resource}"'
    return (node.layout.logs / "kubelet.log").read_text(errors="replace").count(line)


@dataclass(frozen=True)
class SamplePlugin:
    """The operator's DaemonSet for a sample CR, created for a real node."""

    kind: DeviceKind
    node: RealNode
    image: str
    spec: Mapping[str, Any]
    daemonset: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.daemonset["metadata"]["name"])

    def pods(self, client: KubeClient) -> list[dict[str, Any]]:
        """The DaemonSet's pods that are not being deleted."""
        app = self.daemonset["spec"]["selector"]["matchLabels"]["app"]
        pods = client.get(f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods?labelSelector={quote(f'app={app}')}")
        return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]

    def allocatable(self, client: KubeClient) -> dict[str, str]:
        return dict(client.get(f"/api/v1/nodes/{self.node.name}")["status"]["allocatable"])

    def advertised(self, client: KubeClient, expected: Mapping[str, str]) -> bool:
        allocatable = self.allocatable(client)
        return all(allocatable.get(resource) == value for resource, value in expected.items())

    def ready(self, client: KubeClient) -> bool:
        """Whether a pod of this DaemonSet is Ready."""
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for pod in self.pods(client)
            for c in pod.get("status", {}).get("conditions", [])
        )

    def wait_advertised(self, client: KubeClient, expected: Mapping[str, str], timeout: float = 120) -> None:
        """Wait until a pod of the DaemonSet is Ready and the node's allocatable has ``expected``
        (a plugin of the same kind that was just removed may still be counted there); the failure
        names what is missing, the plugin pod's state and the end of its log."""
        wanted = ", ".join(f"{resource}={value}" for resource, value in expected.items())
        try:
            wait_for(
                f"{wanted} on {self.node.name} (plugin pod from {self.image})",
                lambda: self.ready(client) and self.advertised(client, expected),
                timeout=timeout,
            )
        except TimeoutError as error:
            allocatable = self.allocatable(client)
            missing = ", ".join(
                f"{resource}={value} (have {allocatable.get(resource, 'none')})"
                for resource, value in expected.items()
                if allocatable.get(resource) != value
            )
            raise AssertionError(f"{error}\nmissing: {missing}\n{self.describe(client)}") from None

    def describe(self, client: KubeClient) -> str:
        """The plugin pods' phases and container states, and the end of their logs (without debug lines)."""
        lines = []
        for pod in self.pods(client):
            name = pod["metadata"]["name"]
            states = {c["name"]: c.get("state") for c in pod.get("status", {}).get("containerStatuses", [])}
            lines.append(f"plugin pod {name}: {pod.get('status', {}).get('phase')} {states}")
            log = pod_log(
                self.node,
                PLUGIN_NAMESPACE,
                name,
                self.daemonset["spec"]["template"]["spec"]["containers"][0]["name"],
            )
            lines.extend([line for line in log.splitlines() if " DEBUG " not in line][-15:])
        return "\n".join(lines) or f"no pod of DaemonSet {self.name}"


@contextmanager
def sample_plugin(
    client: KubeClient, node: RealNode, kind: DeviceKind, image: str, **changes: Any
) -> Iterator[SamplePlugin]:
    """Run the operator's DaemonSet for the ``kind`` sample (with spec ``changes``) on ``node``.

    The node gets the sample's ``nodeSelector`` labels and the kind's :func:`plugin_identity` for
    the duration; afterwards the DaemonSet and these are deleted and the labels removed.
    """
    spec, ds = sample_daemonset(kind, image, **changes)
    node_path = f"/api/v1/nodes/{node.name}"
    selector = dict(spec["nodeSelector"])
    client.merge_patch(node_path, {"metadata": {"labels": selector}})
    client.apply_ok(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
    )
    identity = plugin_identity(kind)
    create_plugin_identity(client, identity)
    ds_path = f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets"
    client.create(ds_path, ds)
    try:
        yield SamplePlugin(kind, node, image, spec, ds)
    finally:
        client.delete_if_present(f"{ds_path}/{ds['metadata']['name']}")
        delete_plugin_identity(client, identity)
        client.merge_patch(node_path, {"metadata": {"labels": {k: None for k in selector}}})


def run_to_completion(
    client: KubeClient, node: RealNode, manifest: Mapping[str, Any], timeout: float = 60
) -> tuple[dict[str, Any], str]:
    """Create a run-once pod in ``default`` and wait until it Succeeded or Failed: (pod, its log).
    The pod is deleted afterwards."""
    name = manifest["metadata"]["name"]
    client.create(PODS, manifest)
    try:

        def finished() -> dict[str, Any] | None:
            pod = client.get(f"{PODS}/{name}")
            return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        try:
            pod = wait_for(f"pod {name} to finish", finished, timeout=timeout)
        except TimeoutError as error:
            status = client.get(f"{PODS}/{name}").get("status", {})
            raise AssertionError(
                f"{error}\nphase {status.get('phase')}, containers {status.get('containerStatuses')},"
                f" warnings {warning_events(client, name)}"
            ) from None
        return pod, pod_log(node, "default", name)
    finally:
        client.delete(f"{PODS}/{name}")


def warning_events(client: KubeClient, pod: str) -> list[str]:
    """``reason: message`` of every Warning event about pod ``pod`` in ``default``."""
    events = client.get(f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{pod}")
    return [f"{e.get('reason')}: {e.get('message')}" for e in events["items"] if e.get("type") == "Warning"]


def unschedulable_message(client: KubeClient, name: str, timeout: float = 30) -> str:
    """The scheduler's message once pod ``name`` (in ``default``) is marked Unschedulable."""

    def message() -> str | None:
        pod = client.get(f"{PODS}/{name}")
        for condition in pod.get("status", {}).get("conditions", []):
            if (
                condition["type"] == "PodScheduled"
                and condition["status"] == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                return str(condition.get("message", ""))
        return None

    return wait_for(f"pod {name} to be unschedulable", message, timeout=timeout)
