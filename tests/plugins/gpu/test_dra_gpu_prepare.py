"""GPU claims through the framework's prepare path: the CDI spec a container gets for its card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.dra.checkpoint import Checkpoint
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.model import ClaimRef, PreparedClaim
from intel_device_plugins.plugins.gpu.dra import DRIVER_NAME, GpuDriverProfile
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree

NODE = "node-a"
UID_A = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
UID_B = "7c1d0e9f-1111-4a51-9c8e-2f4b6d8a0c1e"


def claim(uid: str, name: str, device: str, **extra: Any) -> dict[str, Any]:
    result = {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": device, **extra}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER_NAME}}]}},
        "status": {"allocation": {"devices": {"results": [result]}, "nodeSelector": {}}},
    }


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=1)
    fake.mkdir("/sys/class/drm")
    fake.mkdir("/dev/dri/by-path")
    fake.write_numa_nodes()
    gpu.add_card(fake, memory_bytes=16 << 30)
    gpu.add_card(fake, driver="xe", device_id="0xe20b", memory_bytes=12 << 30)
    return fake


async def test_a_shared_card_is_prepared_with_its_own_nodes_and_a_vanished_one_is_refused(
    tree: FakeTree, tmp_path: Path
) -> None:
    profile = GpuDriverProfile(prefix=str(tree.root))
    claims = {
        ("ns", "a"): claim(UID_A, "a", "card1", shareID="3f1c", consumedCapacity={"memory": "4Gi"}),
        ("ns", "b"): claim(UID_B, "b", "card1", shareID="9a2d", consumedCapacity={"memory": "4Gi"}),
    }

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return claims[(namespace, name)]

    current = [profile.scan()]
    cdi = tmp_path / "cdi"
    service = KubeletService(
        profile,
        lambda: current[0],
        get_claim,
        NODE,
        Checkpoint.for_driver(tmp_path / "plugins", DRIVER_NAME),
        cdi,
    )

    outcome = (await service.prepare([ClaimRef("ns", "a", UID_A)]))[UID_A]

    assert isinstance(outcome, PreparedClaim), outcome
    (prepared,) = outcome.devices
    assert prepared.cdi_device_ids == (f"k8s.{DRIVER_NAME}/claim={UID_A}-card1",)
    (spec_file,) = outcome.cdi_spec_files
    document = yaml.safe_load((cdi / spec_file).read_text())
    (device,) = document["devices"]
    nodes = [node["path"] for node in device["containerEdits"]["deviceNodes"]]
    assert nodes == [str(tree.path("/dev/dri/card1")), str(tree.path("/dev/dri/renderD129"))]

    # The card's nodes vanish: a claim prepared from now on fails naming it; the first one stays.
    gpu.remove_card(tree, 1)
    current[0] = profile.scan()

    refused = await service.prepare([ClaimRef("ns", "b", UID_B), ClaimRef("ns", "a", UID_A)])
    assert isinstance(refused[UID_B], Exception) and "card1" in str(refused[UID_B])
    assert refused[UID_A] == outcome
