"""Client and process wrapper for the Go device-manager harness (``test/k8s/harness``).

Why: our device plugins must be judged by the kubelet's own device manager - its registration,
health, allocation and run-option code - not by our reading of it. The harness embeds that code;
this module starts it and speaks its small JSON control API.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k8stest.binaries import Binaries
from k8stest.kubeclient import wait_for
from k8stest.process import ManagedProcess

KUBELET_SOCKET_NAME = "kubelet.sock"


class AdmissionError(Exception):
    """The device manager refused a pod (the kubelet would report UnexpectedAdmissionError)."""


@dataclass(frozen=True)
class Device:
    id: str
    health: str
    numa: tuple[int, ...] = ()


@dataclass(frozen=True)
class Resource:
    capacity: int
    allocatable: int
    devices: tuple[Device, ...]

    def healthy_ids(self) -> set[str]:
        return {d.id for d in self.devices if d.health == "Healthy"}


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class RunOptions:
    """What the kubelet would pass to the container runtime for one container."""

    envs: Mapping[str, str]
    mounts: tuple[Mount, ...]
    devices: tuple[DeviceNode, ...]
    annotations: Mapping[str, str]
    cdi_devices: tuple[str, ...]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("harness", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        self.sock = sock


def pod_manifest(
    requests: Mapping[str, int] | Mapping[str, Mapping[str, int]],
    *,
    name: str | None = None,
    namespace: str = "default",
    init_requests: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """A minimal pod for :meth:`DeviceManagerHarness.admit`.

    ``requests`` is either ``{resource: count}`` for a single container named ``ctr`` or
    ``{container: {resource: count}}``. Extended resources are set as limits, as users write them.
    """
    first = next(iter(requests.values()), None)
    single = first is None or isinstance(first, int)
    per_container: Mapping[str, Mapping[str, int]] = (
        {"ctr": requests} if single else requests  # type: ignore[dict-item,assignment]
    )

    def containers(spec: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
        return [
            {
                "name": cname,
                "image": "k8stest",
                "resources": {"limits": {r: str(n) for r, n in res.items()}},
            }
            for cname, res in spec.items()
        ]

    pod_name = name or f"pod-{uuid.uuid4().hex[:8]}"
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {"containers": containers(per_container)},
    }
    if init_requests:
        pod["spec"]["initContainers"] = containers(init_requests)
    return pod


class DeviceManagerHarness:
    """One running harness process: the kubelet's device manager on ``device_plugin_dir``.

    With ``device_plugin_dir`` other than the kubelet's path the harness runs in a private mount
    namespace (root needed), so each test gets a directory of its own.
    """

    def __init__(
        self,
        bins: Binaries,
        workdir: Path,
        device_plugin_dir: Path,
        *,
        kubeconfig: Path | None = None,
        node_name: str | None = None,
        sync_period: str = "1s",
    ) -> None:
        self.bins = bins
        self.workdir = workdir
        self.device_plugin_dir = device_plugin_dir
        self.control_socket = workdir / "harness-control.sock"
        self.podresources_socket = workdir / "pod-resources" / "kubelet.sock"
        self.kubeconfig = kubeconfig
        self.node_name = node_name
        self.sync_period = sync_period
        self.process: ManagedProcess | None = None
        self.starts = 0

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugin_dir / KUBELET_SOCKET_NAME

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.device_plugin_dir.mkdir(parents=True, exist_ok=True)
        argv: list[str | Path] = [
            self.bins.path("devicemanager-harness"),
            f"-device-plugin-dir={self.device_plugin_dir}",
            f"-control-socket={self.control_socket}",
            f"-podresources-socket={self.podresources_socket}",
            f"-node-sync-period={self.sync_period}",
        ]
        if self.kubeconfig is not None:
            argv += [f"-kubeconfig={self.kubeconfig}", f"-node-name={self.node_name}"]
        self.starts += 1
        self.process = ManagedProcess(
            "devicemanager-harness", argv, self.workdir / f"harness-{self.starts}.log"
        )

        def healthy() -> bool:
            assert self.process is not None
            self.process.check_alive()
            try:
                self._request("GET", "/healthz")
            except (OSError, http.client.HTTPException, RuntimeError):
                return False
            return True

        try:
            wait_for("device-manager harness control API", healthy, timeout=timeout, interval=0.1)
        except BaseException:
            self.stop()  # a start that fails leaves nothing running
            raise

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def restart(self) -> None:
        """Stop and start again: what a kubelet restart looks like to a device plugin."""
        self.stop()
        self.start()

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        conn = _UnixHTTPConnection(self.control_socket, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        text = raw.decode(errors="replace")
        if resp.status == 422:
            raise AdmissionError(json.loads(text)["error"])
        if resp.status >= 300:
            raise RuntimeError(f"harness {method} {path}: {resp.status} {text.strip()}")
        if resp.headers.get("Content-Type") == "application/json":
            return json.loads(text)
        return text

    def resources(self) -> dict[str, Resource]:
        """Registered resources with capacity, allocatable and per-device health."""
        raw = self._request("GET", "/state")["resources"]
        return {
            name: Resource(
                capacity=int(r["capacity"]),
                allocatable=int(r["allocatable"]),
                devices=tuple(Device(d["id"], d["health"], tuple(d.get("numa") or ())) for d in r["devices"]),
            )
            for name, r in raw.items()
        }

    def wait_resource(
        self,
        name: str,
        *,
        capacity: int | None = None,
        allocatable: int | None = None,
        timeout: float = 20.0,
    ) -> Resource:
        """Wait until ``name`` is registered (and, if given, has that capacity/allocatable)."""

        def probe() -> Resource | None:
            r = self.resources().get(name)
            if r is None:
                return None
            if capacity is not None and r.capacity != capacity:
                return None
            if allocatable is not None and r.allocatable != allocatable:
                return None
            return r

        return wait_for(
            f"resource {name} (capacity={capacity}, allocatable={allocatable})",
            probe,
            timeout=timeout,
        )

    def admit(self, pod: Mapping[str, Any]) -> dict[str, RunOptions]:
        """Admit a pod as the kubelet does; return run options per container name."""
        raw = self._request("POST", "/pods", pod)["containers"]
        return {
            cname: RunOptions(
                envs=dict(o["envs"]),
                mounts=tuple(Mount(m["container_path"], m["host_path"], m["read_only"]) for m in o["mounts"]),
                devices=tuple(
                    DeviceNode(d["container_path"], d["host_path"], d["permissions"]) for d in o["devices"]
                ),
                annotations=dict(o["annotations"]),
                cdi_devices=tuple(o["cdi_devices"]),
            )
            for cname, o in raw.items()
        }

    def remove_pod(self, uid: str) -> None:
        self._request("DELETE", f"/pods/{uid}")

    def sync_node(self) -> None:
        """Publish the capacity to the Node object now instead of at the next period."""
        self._request("POST", "/node/sync")


def wait_socket_gone(path: Path, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not path.exists():
            return True
        time.sleep(0.05)
    return not path.exists()
