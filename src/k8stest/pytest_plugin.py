"""pytest fixtures for the integration tier: real control plane, kwok nodes, real device manager.

Load from any conftest.py with ``pytest_plugins = ["k8stest.pytest_plugin"]``.

Policy for missing binaries: with ``CI=true`` the fixtures fail (a CI run that silently skipped
the integration tier would be a lie); elsewhere they skip with the command that builds them.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from k8stest.binaries import Binaries, find_binaries, in_ci
from k8stest.controlplane import ControlPlane, start_control_plane
from k8stest.devicemanager import DeviceManagerHarness
from k8stest.kubeclient import KubeClient
from k8stest.kwok import create_kwok_nodes, delete_kwok_nodes


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s: needs the Kubernetes binaries built by test/k8s/build.sh (fails under CI=true)"
    )


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def k8s_binaries() -> Binaries:
    """The built Kubernetes binaries (see test/k8s/build.sh)."""
    bins, reason = find_binaries()
    if bins is None:
        _unavailable(reason)
    assert bins is not None
    return bins


@pytest.fixture(scope="session")
def k8s_control_plane(
    k8s_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + KCM + scheduler + kwok on loopback, shared by the session."""
    cp = start_control_plane(k8s_binaries, tmp_path_factory.mktemp("k8s-control-plane"))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def k8s_admin(k8s_control_plane: ControlPlane) -> Iterator[KubeClient]:
    """An admin (system:masters) client for one test."""
    client = k8s_control_plane.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def kwok_nodes(
    k8s_control_plane: ControlPlane, request: pytest.FixtureRequest
) -> Iterator[Callable[..., list[str]]]:
    """Factory: ``kwok_nodes(count, prefix=...)`` creates Ready kwok nodes, deleted after the test."""
    created: list[str] = []
    client = k8s_control_plane.client()
    test_prefix = f"kwok-{zlib.crc32(request.node.nodeid.encode()):08x}-"

    def make(count: int, *, prefix: str | None = None, labels: dict[str, str] | None = None) -> list[str]:
        names = create_kwok_nodes(
            client, count, prefix=prefix or f"{test_prefix}{len(created)}-", labels=labels
        )
        created.extend(names)
        return names

    try:
        yield make
    finally:
        delete_kwok_nodes(client, created)
        client.close()


@pytest.fixture
def service_account_kubeconfig(k8s_control_plane: ControlPlane) -> Callable[[str, str], Path]:
    """Factory: ``service_account_kubeconfig(namespace, name)`` -> kubeconfig path for that SA."""

    def make(namespace: str, name: str) -> Path:
        return k8s_control_plane.service_account_kubeconfig(namespace, name)

    return make


def _require_root() -> None:
    if os.geteuid() != 0:
        _unavailable("the device-manager harness needs root (mount namespace over /var/lib/kubelet)")


@pytest.fixture
def device_plugin_dir(tmp_path: Path) -> Path:
    """A private device-plugin directory; the harness sees it at the kubelet's path."""
    d = tmp_path / "dp"
    d.mkdir()
    return d


@pytest.fixture
def device_manager(
    k8s_binaries: Binaries, device_plugin_dir: Path, tmp_path: Path
) -> Iterator[DeviceManagerHarness]:
    """The kubelet's real device manager serving ``device_plugin_dir``."""
    _require_root()
    h = DeviceManagerHarness(k8s_binaries, tmp_path / "harness", device_plugin_dir)
    try:
        h.start()
        yield h
    finally:
        h.stop()


@pytest.fixture
def node_device_manager(
    k8s_binaries: Binaries,
    k8s_control_plane: ControlPlane,
    kwok_nodes: Callable[..., list[str]],
    device_plugin_dir: Path,
    tmp_path: Path,
) -> Iterator[DeviceManagerHarness]:
    """A device manager that publishes its capacity to one fresh kwok node (``.node_name``)."""
    _require_root()
    (node,) = kwok_nodes(1)
    h = DeviceManagerHarness(
        k8s_binaries,
        tmp_path / "harness",
        device_plugin_dir,
        kubeconfig=k8s_control_plane.admin_kubeconfig,
        node_name=node,
    )
    try:
        h.start()
        yield h
    finally:
        h.stop()
