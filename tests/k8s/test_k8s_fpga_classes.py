"""The FPGA DeviceClasses against the real API server: the generated classes validate, and the webhook's
sync (``--manage-deviceclasses``), running under the ServiceAccount and the RBAC that
``deploy/webhooks/fpga/deviceclasses`` adds, converges from any state and touches only its own classes."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube import AsyncClient, KubeConfig

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.webhooks.classsync import MANAGED_BY, MANAGED_BY_LABEL, ClassSync, managed_document
from intel_device_plugins.webhooks.fpgaclasses import af_class, region_class
from intel_device_plugins.webhooks.store import MappingStore
from intel_device_plugins.webhooks.watch import follow_all
from k8stest.binaries import repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.operatorinstall import Kubectl
from tests.webhooks.podfixtures import IFACE, IFACE_D5005, NLB0, NLB3, af, region

pytestmark = pytest.mark.k8s

CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
NS = "intelfpgawebhook-system"
SERVICE_ACCOUNT = "intelfpgawebhook-webhook"
# The kinds the sync needs from the install: the CRDs it watches and its identity and rights.
IDENTITY = {"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}


def test_generated_classes_pass_the_api_server(k8s_admin: KubeClient) -> None:
    """Shortest and longest IDs the CRDs admit, both modes, with and without the managed label."""
    specs = [
        af_class("0" * 8, "1" * 8),
        af_class("a" * 32, "b" * 40),
        af_class(IFACE, NLB0),
        region_class("c" * 8),
        region_class(IFACE),
    ]
    for spec in specs:
        for doc in (device_class(spec), managed_document(device_class(spec))):
            created = k8s_admin.create(f"{CLASSES}?dryRun=All", doc)
            assert created["metadata"]["name"] == spec.name
            assert created["spec"]["extendedResourceName"] == spec.extended_resource_name


def _rendered(kubectl: Kubectl, work: Path) -> list[JSON]:
    root = repo_root()
    assert root is not None
    fpga = root / "deploy" / "webhooks" / "fpga"
    overlay = work / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(fpga / "self-signed", overlay)],
                "components": [os.path.relpath(fpga / "deviceclasses", overlay)],
            }
        )
    )
    return [d for d in yaml.safe_load_all(kubectl("kustomize", str(overlay)).stdout) if d]


class SyncThread:
    """The webhook's watch and DeviceClass sync, in a thread of their own, as the ServiceAccount."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to the test
            self.error = error

    async def _main(self) -> None:
        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        client = AsyncClient(KubeConfig.from_file(str(self.kubeconfig)))
        wake = asyncio.Event()
        store = MappingStore(on_change=wake.set)
        tasks = [
            asyncio.create_task(follow_all(client, store)),
            asyncio.create_task(ClassSync(client, store, wake, resync_s=5).run(retry_s=0.5)),
        ]
        try:
            await self.stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    def __enter__(self) -> SyncThread:
        self.thread.start()
        wait_for("the sync's loop", lambda: self.stop is not None, timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        assert self.loop is not None and self.stop is not None
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)
        assert self.error is None, self.error


@pytest.fixture(scope="module")
def identity(k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The CRDs, namespace, ServiceAccount and rights of the FPGA webhook with the deviceclasses
    component; the ServiceAccount's kubeconfig."""
    cp = k8s_control_plane
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    work = tmp_path_factory.mktemp("fpga-classes")
    kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=180s", check=False, timeout=200)
    objects = [d for d in _rendered(kubectl, work) if d["kind"] in IDENTITY]
    manifest = work / "identity.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    kubectl("apply", "-f", str(manifest))
    kubectl(
        "wait", "--for=condition=Established", "crd", "acceleratorfunctions.fpga.intel.com", "--timeout=60s"
    )
    kubectl("wait", "--for=condition=Established", "crd", "fpgaregions.fpga.intel.com", "--timeout=60s")
    try:
        yield cp.service_account_kubeconfig(NS, SERVICE_ACCOUNT, create=False)
    finally:
        kubectl("delete", "deviceclasses", "-l", f"{MANAGED_BY_LABEL}={MANAGED_BY}", check=False)
        # Wait: later modules install the same CRDs and must not meet them terminating.
        kubectl(
            "delete", "-f", str(manifest), "--ignore-not-found", "--timeout=180s", check=False, timeout=200
        )


def _classes(client: KubeClient) -> dict[str, JSON]:
    return {c["metadata"]["name"]: c for c in client.get(CLASSES)["items"]}


def _managed(client: KubeClient) -> set[str]:
    return {n for n, c in _classes(client).items() if c["metadata"].get("labels", {}).get(MANAGED_BY_LABEL)}


def test_sync_converges_from_any_state_and_touches_only_its_own_classes(
    identity: Path, k8s_admin: KubeClient
) -> None:
    client = k8s_admin
    namespaces = ("fc-a", "fc-b")
    nlb0, nlb3_region = af_class(IFACE, NLB0), region_class(IFACE)
    d5005 = region_class(IFACE_D5005)
    stale = managed_document(device_class(af_class("0" * 32, "1" * 32)))
    foreign = device_class(d5005)  # someone applied it from intel_fpga_deviceclasses
    unrelated: JSON = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "fc.example.com"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "example.com"'}}]},
    }
    created: list[str] = []
    try:
        for ns in namespaces:
            client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        for doc in (stale, foreign, unrelated):
            client.create(CLASSES, doc)
            created.append(doc["metadata"]["name"])
        kept = {
            n: _classes(client)[n]["metadata"]["resourceVersion"]
            for n in (foreign["metadata"]["name"], "fc.example.com")
        }
        for ns in namespaces:
            client.create(f"/apis/fpga.intel.com/v2/namespaces/{ns}/acceleratorfunctions", af("nlb0", ns=ns))
        client.create(
            "/apis/fpga.intel.com/v2/namespaces/fc-b/acceleratorfunctions",
            af("nlb3", afu=NLB3, mode="region", ns="fc-b"),
        )
        client.create(
            "/apis/fpga.intel.com/v2/namespaces/fc-b/fpgaregions",
            region("d5005", iface=IFACE_D5005, ns="fc-b"),
        )
        # An object the CRD admits but no class can be made from (odd number of digits) is left out.
        client.create(
            "/apis/fpga.intel.com/v2/namespaces/fc-b/acceleratorfunctions",
            af("odd", afu=NLB0 + "0", ns="fc-b"),
        )
        wanted = {nlb0.name, nlb3_region.name}
        with SyncThread(identity):
            wait_for("the managed classes", lambda: _managed(client) == wanted, timeout=30)
            classes = _classes(client)
            assert classes[nlb0.name]["spec"] == device_class(nlb0)["spec"]
            for name, version in kept.items():
                assert classes[name]["metadata"]["resourceVersion"] == version, f"{name} was touched"

            # Edited and deleted by hand: put back.
            client.merge_patch(f"{CLASSES}/{nlb0.name}", {"spec": {"extendedResourceName": None}})
            client.delete(f"{CLASSES}/{nlb3_region.name}")

            def repaired() -> bool:
                now = _classes(client)
                return (
                    now.get(nlb0.name, {}).get("spec") == device_class(nlb0)["spec"]
                    and nlb3_region.name in now
                )

            wait_for("the edited and the deleted class repaired", repaired, timeout=30)

            # One of two namespaces' objects gone: the class stays; the last one gone: it goes.
            client.delete("/apis/fpga.intel.com/v2/namespaces/fc-a/acceleratorfunctions/nlb0")
            client.delete("/apis/fpga.intel.com/v2/namespaces/fc-b/acceleratorfunctions/nlb3")
            wait_for("the region class withdrawn", lambda: _managed(client) == {nlb0.name}, timeout=30)
            client.delete("/apis/fpga.intel.com/v2/namespaces/fc-b/acceleratorfunctions/nlb0")
            wait_for("every managed class withdrawn", lambda: _managed(client) == set(), timeout=30)
            classes = _classes(client)
            for name, version in kept.items():
                assert classes[name]["metadata"]["resourceVersion"] == version, f"{name} was touched"
    finally:
        for name in created:
            try:
                client.delete(f"{CLASSES}/{name}")
            except ApiError as error:
                if error.status != 404:
                    raise
        for ns in namespaces:
            client.delete_if_present(f"/api/v1/namespaces/{ns}")
