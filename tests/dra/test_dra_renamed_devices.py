"""A driver upgraded across a device renaming still answers and unprepares what the earlier release
prepared: prepare answers a known claim from the checkpoint (the names it recorded), and unprepare works
from the claim UID and the spec files the checkpoint recorded, never from device names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from intel_device_plugins.dra.checkpoint import Checkpoint
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.model import ClaimRef
from intel_device_plugins.dra.prepare import spec_file_name
from tests.dra.draclaims import NODE, Profile, claim, inventory, result

DRIVER = "qat.intel.com"
UID = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
OLD_NAME, NEW_NAME = "vf-0000-6b-00-1", "qatvf-0000-6b-00-1"


def old_release_checkpoint(path: Path, spec_file: str) -> None:
    """The checkpoint the previous release wrote for one claim holding ``vf-0000-6b-00-1``, byte for byte
    in its format (a header line, then one prepared record)."""
    lines = [
        {"driver": DRIVER, "version": 1},
        {
            "prepared": {
                "uid": UID,
                "namespace": "ns",
                "name": "claim",
                "devices": [
                    {
                        "requests": ["qat"],
                        "pool": NODE,
                        "device": OLD_NAME,
                        "cdiDeviceIDs": [f"k8s.{DRIVER}/claim={UID}-{OLD_NAME}"],
                    }
                ],
                "cdiSpecFiles": [spec_file],
            }
        },
    ]
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n" for line in lines))


def test_claims_prepared_under_the_old_names_are_answered_and_unprepared(tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    spec_file = spec_file_name(DRIVER, UID)
    (cdi_dir / spec_file).write_text("{}")
    checkpoint = Checkpoint.for_driver(tmp_path / "plugins", DRIVER)
    old_release_checkpoint(checkpoint.path, spec_file)
    profile = Profile(current=inventory(NEW_NAME), driver_name=DRIVER)
    reads: list[str] = []

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        reads.append(name)
        return claim(UID, result(NEW_NAME, request="qat", driver=DRIVER))

    async def scenario() -> None:
        service = KubeletService(profile, profile.scan, get_claim, NODE, checkpoint, cdi_dir)
        ref = ClaimRef("ns", "claim", UID)
        # A kubelet restart repeats the prepare: the answer is what the old release gave.
        outcome = (await service.prepare([ref]))[UID]
        assert not isinstance(outcome, BaseException), outcome
        assert [device.device for device in outcome.devices] == [OLD_NAME]
        assert reads == [], "answered from the checkpoint, without the API server"
        assert service.unprepare([ref]) == {UID: None}
        assert not (cdi_dir / spec_file).exists()
        assert checkpoint.load() == {}

    asyncio.run(scenario())


def test_unprepare_of_an_old_claim_needs_no_device_of_that_name(tmp_path: Path) -> None:
    """The device the old checkpoint names is gone from the inventory altogether; unprepare still
    removes the claim's spec file, which it knows from the UID alone."""
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    spec_file = spec_file_name(DRIVER, UID)
    (cdi_dir / spec_file).write_text("{}")
    checkpoint = Checkpoint.for_driver(tmp_path / "plugins", DRIVER)
    old_release_checkpoint(checkpoint.path, spec_file)
    profile = Profile(current=inventory(), driver_name=DRIVER)

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        raise AssertionError("unprepare reads no claim")

    async def scenario() -> None:
        service = KubeletService(profile, profile.scan, get_claim, NODE, checkpoint, cdi_dir)
        assert service.unprepare([ClaimRef("ns", "claim", UID)]) == {UID: None}

    asyncio.run(scenario())
    assert not (cdi_dir / spec_file).exists()
    assert checkpoint.load() == {}
