"""GPU claims through the framework's prepare path: the CDI spec a container gets for its card."""

from __future__ import annotations

import shutil
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
XE_CARD = "0000-11-00-0-0xe20b"
"""The fixture's second card (``card1``, xe, PCI 0000:11:00.0) by its device name."""
OLD_RELEASE = Path(__file__).parent / "data" / "card-names"
"""A checkpoint and CDI spec written by the previous release (devices named ``card<N>``) for claim
``ns/a`` (UID_A) sharing ``card1`` of the fixture's node."""
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
        ("ns", "a"): claim(UID_A, "a", XE_CARD, shareID="3f1c", consumedCapacity={"memory": "4Gi"}),
        ("ns", "b"): claim(UID_B, "b", XE_CARD, shareID="9a2d", consumedCapacity={"memory": "4Gi"}),
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
    assert prepared.cdi_device_ids == (f"k8s.{DRIVER_NAME}/claim={UID_A}-{XE_CARD}",)
    (spec_file,) = outcome.cdi_spec_files
    document = yaml.safe_load((cdi / spec_file).read_text())
    (device,) = document["devices"]
    nodes = [node["path"] for node in device["containerEdits"]["deviceNodes"]]
    assert nodes == [str(tree.path("/dev/dri/card1")), str(tree.path("/dev/dri/renderD129"))]

    # The card's nodes vanish: a claim prepared from now on fails naming it; the first one stays.
    gpu.remove_card(tree, 1)
    current[0] = profile.scan()

    refused = await service.prepare([ClaimRef("ns", "b", UID_B), ClaimRef("ns", "a", UID_A)])
    assert isinstance(refused[UID_B], Exception) and XE_CARD in str(refused[UID_B])
    assert refused[UID_A] == outcome


def _service(
    profile: GpuDriverProfile, tmp_path: Path, claims: dict[tuple[str, str], dict[str, Any]]
) -> KubeletService:
    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return claims[(namespace, name)]

    inventory = profile.scan()
    checkpoint = Checkpoint.for_driver(tmp_path / "plugins", DRIVER_NAME)
    return KubeletService(profile, lambda: inventory, get_claim, NODE, checkpoint, tmp_path / "cdi")


def _install_old_release_state(tmp_path: Path) -> Path:
    (tmp_path / "plugins" / DRIVER_NAME).mkdir(parents=True)
    shutil.copy(OLD_RELEASE / "checkpoint.json", tmp_path / "plugins" / DRIVER_NAME / "checkpoint.json")
    (tmp_path / "cdi").mkdir()
    (spec,) = OLD_RELEASE.glob("k8s.*.json")
    shutil.copy(spec, tmp_path / "cdi" / spec.name)
    return tmp_path / "cdi" / spec.name


async def test_a_claim_the_old_release_prepared_under_a_card_name_is_answered_then_unprepared(
    tree: FakeTree, tmp_path: Path
) -> None:
    spec = _install_old_release_state(tmp_path)
    old_claim = claim(UID_A, "a", "card1", shareID="3f1c", consumedCapacity={"memory": "4Gi"})
    profile = GpuDriverProfile(prefix=str(tree.root))
    service = _service(profile, tmp_path, {("ns", "a"): old_claim})
    assert "card1" not in profile.scan().by_name()  # published under its new name only

    again = (await service.prepare([ClaimRef("ns", "a", UID_A)]))[UID_A]

    assert isinstance(again, PreparedClaim), again
    (device,) = again.devices
    assert (device.device, device.cdi_device_ids) == ("card1", (f"k8s.{DRIVER_NAME}/claim={UID_A}-card1",))
    assert again.cdi_spec_files == (spec.name,)

    errors = service.unprepare([ClaimRef("ns", "a", UID_A)])

    assert errors == {UID_A: None}
    assert not spec.exists()
    assert UID_A not in service.checkpoint.load()


async def test_a_claim_allocated_under_a_card_name_is_prepared_after_the_upgrade(
    tree: FakeTree, tmp_path: Path
) -> None:
    """The checkpoint lost it (its spec file went with a reboot): the old name still finds the card."""
    spec = _install_old_release_state(tmp_path)
    spec.unlink()
    old_claim = claim(UID_A, "a", "card1", shareID="3f1c", consumedCapacity={"memory": "4Gi"})
    service = _service(GpuDriverProfile(prefix=str(tree.root)), tmp_path, {("ns", "a"): old_claim})

    prepared = (await service.prepare([ClaimRef("ns", "a", UID_A)]))[UID_A]

    assert isinstance(prepared, PreparedClaim), prepared
    document = yaml.safe_load(spec.read_text())
    (device,) = document["devices"]
    nodes = [node["path"] for node in device["containerEdits"]["deviceNodes"]]
    assert nodes == [str(tree.path("/dev/dri/card1")), str(tree.path("/dev/dri/renderD129"))]


async def test_admin_access_gets_the_cards_mei_device_and_a_workload_does_not(tmp_path: Path) -> None:
    fake = FakeTree(tmp_path / "node", numa_nodes=1)
    fake.mkdir("/sys/class/drm")
    fake.mkdir("/dev/dri/by-path")
    fake.write_numa_nodes()
    with_mei = gpu.add_card(fake, mei=True)
    without = gpu.add_card(fake)
    names = [f"{c.address.replace(':', '-').replace('.', '-')}-0x56c0" for c in (with_mei, without)]
    claims = {
        ("ns", "monitor"): claim(UID_A, "monitor", names[0], adminAccess=True),
        ("ns", "plain"): claim(UID_B, "plain", names[0]),
    }
    claims[("ns", "monitor")]["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": names[1], "adminAccess": True}
    )
    service = _service(GpuDriverProfile(prefix=str(fake.root)), tmp_path, claims)

    outcomes = await service.prepare([ClaimRef("ns", "monitor", UID_A), ClaimRef("ns", "plain", UID_B)])

    def device_nodes(uid: str) -> dict[str, list[str]]:
        outcome = outcomes[uid]
        assert isinstance(outcome, PreparedClaim), outcome
        document = yaml.safe_load((tmp_path / "cdi" / outcome.cdi_spec_files[0]).read_text())
        return {
            d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in document["devices"]
        }

    monitor = device_nodes(UID_A)
    assert monitor[f"{UID_A}-{names[0]}"] == [
        str(fake.path("/dev/dri/card0")),
        str(fake.path("/dev/dri/renderD128")),
        str(fake.path("/dev/mei0")),
    ]
    assert monitor[f"{UID_A}-{names[1]}"] == [
        str(fake.path("/dev/dri/card1")),
        str(fake.path("/dev/dri/renderD129")),
    ]
    assert device_nodes(UID_B)[f"{UID_B}-{names[0]}"] == [
        str(fake.path("/dev/dri/card0")),
        str(fake.path("/dev/dri/renderD128")),
    ]
