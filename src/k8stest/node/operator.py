"""The operator installed from ``deploy/`` onto a real node, as a user installs it.

Unlike :mod:`k8stest.operatorinstall` (kwok nodes, the operator as a local process), nothing here
stands in for anything: the images come from ``make images`` and are imported into the node's
containerd; a kustomization of ``deploy/operator/self-signed`` with ``images:`` entries (the way
docs/install.md sets a registry) is applied with kubectl; the Deployment's pod runs under the
kubelet, reaches the API server through the ``kubernetes`` Service, and the API server calls its
webhooks through their Service. The samples are rendered through the same ``images:`` entries.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.operator.images import NODE_IMAGE_NAME, OPERATOR_IMAGE_NAME, image
from k8stest.binaries import repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node import RealNode, pod_log
from k8stest.node.plugins import image_archive, registrations
from k8stest.ociimage import qualified_reference
from k8stest.operatorinstall import NS, PREFIX, Kubectl

DEPLOYMENT = f"{PREFIX}controller-manager"
OPERATOR_LABELS = "app.kubernetes.io/name=intel-deviceplugin-operator"


def images_kustomization(resource: str) -> JSON:
    """A kustomization of ``resource`` whose ``images:`` entries name the images as the node's
    containerd holds them (qualified with ``localhost/``, k8stest.ociimage says why)."""
    entries = []
    for name in (OPERATOR_IMAGE_NAME, NODE_IMAGE_NAME):
        reference = image(name)
        repository = reference.rsplit(":", 1)[0]
        entries.append({"name": repository, "newName": qualified_reference(repository)})
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [resource],
        "images": entries,
    }


@dataclass
class NodeOperator:
    """The operator Deployment running on ``node``; :func:`install_operator` makes one."""

    cp: ControlPlane
    node: RealNode
    kubectl: Kubectl
    overlay: Path
    samples: dict[str, JSON]  # kind -> the rendered sample CR
    ready_in: float = 0.0

    def client(self) -> KubeClient:
        return self.cp.client()

    def operator_pods(self, client: KubeClient) -> list[JSON]:
        pods = client.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={OPERATOR_LABELS}")["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def log(self) -> str:
        out = self.kubectl("logs", "-n", NS, f"deployment/{DEPLOYMENT}", "--tail=60", check=False)
        return out.stdout + out.stderr

    def diagnosis(self) -> str:
        """What a failed wait should show: the namespace's workloads, events and the operator's log."""
        parts = [
            self.kubectl(*args, check=False)
            for args in (
                ("get", "-n", NS, "daemonsets,pods", "-o", "wide"),
                ("get", "-n", NS, "events", "--sort-by=.lastTimestamp"),
            )
        ]
        text = "\n".join(p.stdout + p.stderr for p in parts)
        client = self.client()
        try:
            names = [p["metadata"]["name"] for p in self.operator_pods(client)]
        finally:
            client.close()
        logs = "\n".join(
            "\n".join(
                line for line in pod_log(self.node, NS, name, "manager").splitlines() if "httpx" not in line
            )[-4000:]
            for name in names
        )
        return f"{text}\noperator log (from the node):\n{logs}"

    def uninstall(self, timeout: float = 180) -> None:
        """Delete everything the overlay made and wait until the namespace is gone."""
        self.kubectl("delete", "-k", str(self.overlay), "--ignore-not-found", "--wait=false", check=False)
        self.kubectl(
            "wait",
            "--for=delete",
            f"namespace/{NS}",
            f"--timeout={int(timeout)}s",
            check=False,
            timeout=timeout + 20,
        )


def _ready(pod: JSON) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def install_operator(cp: ControlPlane, node: RealNode, workdir: Path, timeout: float = 180) -> NodeOperator:
    """Import both images, apply the self-signed install and wait until the operator pod is Ready
    and its webhooks answer through the API server."""
    root = repo_root()
    if root is None:
        raise FileNotFoundError("deploy/ (k8stest runs from a checkout)")
    present = set(node.image_names())
    for target, name in (("operator", OPERATOR_IMAGE_NAME), ("node", NODE_IMAGE_NAME)):
        archive = image_archive(target)
        if archive is None:
            raise FileNotFoundError(f"no {target} image archive ({target}-*.oci.tar): run `make images`")
        if qualified_reference(image(name)) not in present:  # the plugin tests may have imported it
            node.import_images(archive)
    overlay, samples_dir = workdir / "install", workdir / "samples"
    for directory, resource in (
        (overlay, root / "deploy" / "operator" / "self-signed"),
        (samples_dir, root / "deploy" / "operator" / "samples"),
    ):
        directory.mkdir(parents=True, exist_ok=True)
        # kustomize takes only relative paths to other kustomizations
        relative = os.path.relpath(resource, directory)
        (directory / "kustomization.yaml").write_text(yaml.safe_dump(images_kustomization(relative)))
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    rendered = [d for d in yaml.safe_load_all(kubectl("kustomize", str(samples_dir)).stdout) if d]
    samples = {d["kind"].removesuffix("DevicePlugin").lower(): d for d in rendered}
    t0 = time.monotonic()
    kubectl("apply", "-k", str(overlay), timeout=180)
    installed = NodeOperator(cp, node, kubectl, overlay, samples)
    client = cp.client()
    try:

        def pod_ready() -> bool:
            node.check_alive()
            return any(_ready(p) for p in installed.operator_pods(client))

        try:
            wait_for(f"the operator pod Ready on {node.name}", pod_ready, timeout=timeout)
            # Ready means the webhook server listens; the CA bundle is injected just before.
            wait_for(
                "the operator's webhooks through the API server", lambda: _webhooks_answer(client), timeout=60
            )
        except TimeoutError as e:
            raise AssertionError(f"{e}; operator log:\n{installed.log()[-4000:]}") from None
    finally:
        client.close()
    installed.ready_in = time.monotonic() - t0
    return installed


def _webhooks_answer(client: KubeClient) -> bool:
    """A dry-run create of an empty GpuDevicePlugin: the defaulting webhook must set its image."""
    body: dict[str, Any] = {
        "apiVersion": "deviceplugin.intel.com/v1",
        "kind": "GpuDevicePlugin",
        "metadata": {"name": "webhook-probe"},
        "spec": {},
    }
    try:
        created = client.create("/apis/deviceplugin.intel.com/v1/gpudeviceplugins?dryRun=All", body)
    except ApiError as e:
        if e.status in (500, 503) or "failed calling webhook" in str(e):
            return False
        raise
    return bool(created["spec"].get("image"))


@dataclass(frozen=True)
class Roll:
    seconds: float  # patch → one new plugin pod on the new image, allocatable back at its count
    below_count: float  # how long allocatable was below its count meanwhile


def live_pods(client: KubeClient, pods_path: str) -> list[JSON]:
    return [p for p in client.get(pods_path)["items"] if not p["metadata"].get("deletionTimestamp")]


def roll_plugin_image(
    client: KubeClient, node: RealNode, cr_path: str, pods_path: str, resource: str, new_image: str
) -> Roll:
    """Change the CR's ``spec.image`` to ``new_image`` (tagged in the node's containerd from the
    current image first) and follow the roll of its single-node DaemonSet until the old pod is gone,
    the new one has registered with the kubelet and allocatable is back at its count."""
    node_path = f"/api/v1/nodes/{node.name}"

    def allocatable() -> str:
        return str(client.get(node_path)["status"]["allocatable"].get(resource, "0"))

    old_image = str(client.get(cr_path)["spec"]["image"])
    node.ctr("images", "tag", "--force", old_image, new_image)
    expected = allocatable()
    (old_pod,) = live_pods(client, pods_path)
    old_path = f"/api/v1/namespaces/{old_pod['metadata']['namespace']}/pods/{old_pod['metadata']['name']}"
    registered = registrations(node, resource)
    down_since: float | None = None
    below = 0.0
    t0 = time.monotonic()
    client.merge_patch(cr_path, {"spec": {"image": new_image}})

    def old_pod_gone() -> bool:
        try:
            return bool(client.get(old_path)["metadata"]["uid"] != old_pod["metadata"]["uid"])
        except ApiError as e:
            if e.status == 404:
                return True
            raise

    def rolled() -> bool:
        nonlocal down_since, below
        now, value = time.monotonic(), allocatable()
        if value != expected and down_since is None:
            down_since = now
        elif value == expected and down_since is not None:
            below += now - down_since
            down_since = None
        if value != expected or registrations(node, resource) <= registered or not old_pod_gone():
            return False
        pods = live_pods(client, pods_path)
        return len(pods) == 1 and pods[0]["spec"]["containers"][0]["image"] == new_image

    what = f"the plugin pod to roll to {new_image} with {resource}={expected}"
    wait_for(what, rolled, timeout=120, interval=0.05)
    return Roll(time.monotonic() - t0, below)
