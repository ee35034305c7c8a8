"""A DRA driver installed from ``deploy/dra/<kind>`` onto one real node, as a user installs it.

The node image from ``make images`` must be in the node's containerd already. A kustomization of
the kind's directory names that image (``images:``, as for the operator in
:mod:`k8stest.node.operator`) and adds one node selector, so the driver runs on the node under test
and not on other nodes of the same control plane. It is applied with kubectl: namespace,
ServiceAccount, RBAC, the ResourceSlice admission policy, the DeviceClasses and the DaemonSet, all
as shipped.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from k8stest.binaries import repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node.dra import node_slices, published_devices
from k8stest.node.operator import images_kustomization
from k8stest.node.pods import pod_log
from k8stest.node.running import RealNode
from k8stest.operatorinstall import Kubectl

__all__ = ["ROLL_ANNOTATION", "DraDriver", "driver_connections", "install_dra_driver"]

# A pod template annotation whose change starts a rolling update of the driver's DaemonSet.
ROLL_ANNOTATION = "k8stest.example.com/roll"


def driver_connections(node: RealNode, driver: str) -> int:
    """How often the node's kubelet (any run of it) connected to a plugin of ``driver``: its
    plugin manager logs each connection change at -v=2, which the node's kubelet runs with."""
    text = (node.layout.logs / "kubelet.log").read_text(errors="replace")
    pattern = re.compile(rf'"Connection changed" .*driverName="{re.escape(driver)}" .*connected=true')
    return sum(1 for line in text.splitlines() if pattern.search(line))


@dataclass
class DraDriver:
    """A driver DaemonSet applied from ``deploy/dra/<kind>``; :func:`install_dra_driver` makes one."""

    driver: str  # the driver's name, e.g. gpu.intel.com
    namespace: str
    daemonset: str
    container: str
    command: str  # what the container runs, e.g. intel_gpu_dra_driver
    node: RealNode
    kubectl: Kubectl
    overlay: Path
    objects: list[JSON]  # what the overlay renders

    def pods(self, client: KubeClient) -> list[JSON]:
        """The DaemonSet's pods on the node that are not being deleted."""
        selector = quote(f"app={self.daemonset}")
        found = client.get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={selector}")["items"]
        return [
            p
            for p in found
            if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") == self.node.name
        ]

    def ready_pod(self, client: KubeClient) -> JSON | None:
        for pod in self.pods(client):
            conditions = pod.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return pod
        return None

    def process_ids(self) -> list[int]:
        """The node's processes running the driver's command (its console script), found in the
        node's pids cgroup subtree."""
        script = self.command
        found = []
        root = Path("/sys/fs/cgroup/pids") / self.node.layout.cgroup.lstrip("/")
        for directory, _, _ in os.walk(root):
            try:
                pids = (Path(directory) / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(
                    part.decode(errors="replace").endswith(f"/{script}") or part == script.encode()
                    for part in argv[:2]
                ):
                    found.append(int(pid))
        return sorted(found)

    def describe(self, client: KubeClient) -> str:
        """The driver pods' phases and container states and the end of their logs."""
        lines = []
        for pod in self.pods(client):
            name = pod["metadata"]["name"]
            states = {c["name"]: c.get("state") for c in pod.get("status", {}).get("containerStatuses", [])}
            lines.append(f"driver pod {name}: {pod.get('status', {}).get('phase')} {states}")
            log = pod_log(self.node, self.namespace, name, self.container)
            lines.extend(log.splitlines()[-20:])
        return (
            "\n".join(lines) or f"no pod of DaemonSet {self.namespace}/{self.daemonset} on {self.node.name}"
        )

    def wait_published(self, client: KubeClient, devices: set[str], timeout: float = 120) -> dict[str, JSON]:
        """Wait until the driver's slices for the node hold exactly ``devices``; the failure names
        the devices missing and those too many, and shows the driver pods."""

        def exact() -> dict[str, JSON] | None:
            self.node.check_alive()
            found = published_devices(client, self.node.name, self.driver)
            return found if set(found) == devices else None

        try:
            return wait_for(
                f"{self.driver} to publish {sorted(devices)} for {self.node.name}", exact, timeout=timeout
            )
        except TimeoutError as error:
            found = set(published_devices(client, self.node.name, self.driver))
            raise AssertionError(
                f"{error}\nmissing: {sorted(devices - found)}, not expected: {sorted(found - devices)}\n"
                f"{self.describe(client)}"
            ) from None

    def wait_ready(self, client: KubeClient, *, connections_before: int = -1, timeout: float = 120) -> JSON:
        """Wait until a driver pod is Ready and, when ``connections_before`` is given, the kubelet
        has connected to the driver more often than that; returns the pod."""

        def ready() -> JSON | None:
            self.node.check_alive()
            pod = self.ready_pod(client)
            if pod is None or driver_connections(self.node, self.driver) <= connections_before:
                return None
            return pod

        try:
            return wait_for(f"a Ready {self.driver} driver pod on {self.node.name}", ready, timeout=timeout)
        except TimeoutError as error:
            connections = driver_connections(self.node, self.driver)
            raise AssertionError(
                f"{error}; kubelet connections to {self.driver}: {connections}"
                f" (before: {connections_before})\n{self.describe(client)}"
            ) from None

    def restart(self, client: KubeClient, *, wait: bool = True) -> str:
        """Delete the driver's pod; the DaemonSet makes a new one. With ``wait``, return once the new
        pod is Ready and the kubelet connected to it; returns the deleted pod's name."""
        pod = self.ready_pod(client) or next(iter(self.pods(client)), None)
        if pod is None:
            raise AssertionError(f"no driver pod to restart\n{self.describe(client)}")
        before = driver_connections(self.node, self.driver)
        name = str(pod["metadata"]["name"])
        client.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
        if wait:
            self.wait_replaced(client, name, before)
        return name

    def wait_replaced(self, client: KubeClient, name: str, connections_before: int) -> None:
        """Wait until driver pod ``name`` is gone and a new one is Ready and connected to the
        kubelet more often than ``connections_before`` (several drivers restart at once this way)."""

        def replaced() -> bool:
            return all(p["metadata"]["name"] != name for p in self.pods(client))

        try:
            wait_for(f"{self.driver} driver pod {name} replaced", replaced, timeout=60)
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{self.describe(client)}") from None
        self.wait_ready(client, connections_before=connections_before)

    def roll(self, client: KubeClient, *, wait: bool = True) -> set[str]:
        """Start a rolling update of the DaemonSet (a pod template annotation changes); with
        ``wait``, return once the old pods are gone and a new one is Ready and connected to the
        kubelet. Returns the old pods' UIDs."""
        old = {str(p["metadata"]["uid"]) for p in self.pods(client)}
        before = driver_connections(self.node, self.driver)
        path = f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{self.daemonset}"
        stamp = str(time.monotonic_ns())
        client.merge_patch(
            path, {"spec": {"template": {"metadata": {"annotations": {ROLL_ANNOTATION: stamp}}}}}
        )
        if wait:
            self.wait_rolled(client, old, before)
        return old

    def wait_rolled(
        self, client: KubeClient, old: set[str], connections_before: int, timeout: float = 120
    ) -> None:
        """Wait until none of the ``old`` pods is left and a new pod is Ready and connected."""

        def rolled() -> bool:
            pods = self.pods(client)
            return bool(pods) and not any(p["metadata"]["uid"] in old for p in pods)

        try:
            wait_for(f"driver pods {sorted(old)} replaced", rolled, timeout=timeout)
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{self.describe(client)}") from None
        self.wait_ready(client, connections_before=connections_before, timeout=timeout)

    def uninstall(self, client: KubeClient, timeout: float = 120) -> None:
        """Delete what the overlay made; wait until the namespace is gone."""
        self.kubectl("delete", "-k", str(self.overlay), "--ignore-not-found", "--wait=false", check=False)

        def gone() -> bool:
            try:
                client.get(f"/api/v1/namespaces/{self.namespace}")
            except ApiError as e:
                if e.status == 404:
                    return True
                raise
            return False

        wait_for(f"namespace {self.namespace} deleted", gone, timeout=timeout)

    def slices(self, client: KubeClient) -> list[JSON]:
        return node_slices(client, self.node.name, self.driver)


def _single(objects: list[JSON], kind: str) -> JSON:
    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise AssertionError(f"the driver's kustomization renders {len(found)} {kind} objects, expected one")
    return found[0]


def install_dra_driver(
    cp: ControlPlane, node: RealNode, kind: str, workdir: Path, *, args: Sequence[str] = ()
) -> DraDriver:
    """Apply ``deploy/dra/<kind>`` for ``node`` only (``kubernetes.io/hostname`` added to the
    DaemonSet's node selector) and wait until its pod is Ready and the kubelet connected to it.
    ``args`` are appended to the driver container's arguments (a later flag overrides the
    shipped one, e.g. ``-mode region`` for FPGA)."""
    root = repo_root()
    if root is None:
        raise FileNotFoundError("deploy/ (k8stest runs from a checkout)")
    source = root / "deploy" / "dra" / kind
    if not (source / "kustomization.yaml").is_file():
        raise FileNotFoundError(f"{source}/kustomization.yaml: no DRA driver deployment for {kind!r}")
    overlay = workdir / f"dra-{kind}"
    overlay.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = images_kustomization(os.path.relpath(source, overlay))
    document["patches"] = [
        {
            "target": {"kind": "DaemonSet"},
            "patch": yaml.safe_dump(
                [
                    {
                        "op": "add",
                        "path": "/spec/template/spec/nodeSelector/kubernetes.io~1hostname",
                        "value": node.name,
                    },
                    *(
                        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": arg}
                        for arg in args
                    ),
                ]
            ),
        }
    ]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(document))
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    objects = [d for d in yaml.safe_load_all(kubectl("kustomize", str(overlay)).stdout) if d]
    daemonset = _single(objects, "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    driver = _driver_name(objects, kind)
    installed = DraDriver(
        driver=driver,
        namespace=daemonset["metadata"]["namespace"],
        daemonset=daemonset["metadata"]["name"],
        container=container["name"],
        command=container["command"][0],
        node=node,
        kubectl=kubectl,
        overlay=overlay,
        objects=objects,
    )
    before = driver_connections(node, driver)
    kubectl("apply", "-k", str(overlay), timeout=120)
    client = cp.client()
    try:
        installed.wait_ready(client, connections_before=before)
    finally:
        client.close()
    return installed


def _driver_name(objects: list[JSON], kind: str) -> str:
    """The driver's name: the one ``device.driver`` every shipped DeviceClass selects."""
    names = set()
    for obj in objects:
        if obj.get("kind") != "DeviceClass":
            continue
        for selector in obj["spec"].get("selectors", []):
            match = re.search(r'device\.driver == "([^"]+)"', selector.get("cel", {}).get("expression", ""))
            if match:
                names.add(match.group(1))
    if len(names) != 1:
        raise AssertionError(
            f"deploy/dra/{kind}: the DeviceClasses name drivers {sorted(names)}, expected one"
        )
    return names.pop()
