"""Claims prepared by Intel's DRA drivers, taken over from their checkpoint by this project's driver."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra import intelcheckpoint
from intel_device_plugins.dra.checkpoint import Checkpoint, CheckpointError
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.model import ClaimRef
from tests.dra.draclaims import NODE, Profile, inventory

GPU = "gpu.intel.com"
QAT = "qat.intel.com"
UID_A = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
UID_B = "7c1d0e9f-1111-4a51-9c8e-2f4b6d8a0c1e"


def go_device(name: str, request: str = "gpu", cdi: str = "intel.com/gpu", **extra: Any) -> dict[str, Any]:
    """``kubeletplugin.Device`` as Go's encoding/json writes it (field names, ``null`` for no list)."""
    return {
        "Requests": [request],
        "PoolName": NODE,
        "DeviceName": name,
        "CDIDeviceIDs": [f"{cdi}={name}"],
        "ShareID": None,
        **extra,
    }


def versioned(claims: dict[str, list[dict[str, Any]]]) -> bytes:
    """Intel's GPU driver's checkpoint (``checkpoint.gpu.intel.com/v1``)."""
    return json.dumps(
        {
            "kind": "PreparedClaimsCheckpoint",
            "apiVersion": "checkpoint.gpu.intel.com/v1",
            "PreparedClaims": {
                uid: {"PreparedDevices": [{"AdminAccess": False, "KubeletpluginDevice": d} for d in devices]}
                for uid, devices in claims.items()
            },
        }
    ).encode()


def unversioned(claims: dict[str, list[dict[str, Any]]]) -> bytes:
    """The older GPU and the QAT driver's map of claim UID to ``PrepareResult``."""
    return json.dumps({uid: {"Devices": devices, "Err": None} for uid, devices in claims.items()}).encode()


def test_the_versioned_gpu_checkpoint_is_read() -> None:
    data = versioned({UID_A: [go_device("0000-03-00-0-0x56c0"), go_device("0000-04-00-0-0x56c0")]})
    claims = intelcheckpoint.decode(data, "preparedClaims.json")
    (claim,) = claims.values()
    assert claim.claim.uid == UID_A
    assert [(d.device, d.pool, d.requests, d.cdi_device_ids) for d in claim.devices] == [
        ("0000-03-00-0-0x56c0", NODE, ("gpu",), ("intel.com/gpu=0000-03-00-0-0x56c0",)),
        ("0000-04-00-0-0x56c0", NODE, ("gpu",), ("intel.com/gpu=0000-04-00-0-0x56c0",)),
    ]
    assert claim.cdi_spec_files == (), "Intel's spec is one file for all devices, not the claim's"


def test_the_unversioned_map_is_read_with_gos_leniencies() -> None:
    device = go_device("qatvf-0000-6b-00-1", request="qat", cdi="intel.com/qat")
    device["CDIDeviceIDs"] = None  # Go writes a nil list as null
    del device["ShareID"]
    lower = {
        key.lower(): value for key, value in go_device("qatvf-0000-6b-00-2", cdi="intel.com/qat").items()
    }
    claims = intelcheckpoint.decode(unversioned({UID_A: [device], UID_B: [lower]}), "qat")
    assert claims[UID_A].devices[0].cdi_device_ids == ()
    assert claims[UID_B].devices[0].device == "qatvf-0000-6b-00-2", "Go matches field names in any case"
    assert intelcheckpoint.decode(b"{}", "empty") == {}, "what Intel's driver creates on its first start"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[]", "is not an object"),
        (b"{", "not valid JSON"),
        (b'{"kind": "PreparedClaimsCheckpoint", "apiVersion": "checkpoint.gpu.intel.com/v2"}', "apiVersion"),
        (unversioned({"../x": []}), "not a valid UID"),
        (
            unversioned({UID_A: [{"DeviceName": "d", "PoolName": 7}]}),
            rf"claim {UID_A}\.Devices\[0\]\.PoolName",
        ),
        (
            versioned({UID_A: [{"PoolName": "n", "DeviceName": "d", "Requests": "gpu"}]}),
            "Requests is not a list",
        ),
    ],
)
def test_a_checkpoint_that_cannot_be_read_names_the_file_and_field(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        intelcheckpoint.decode(data, "preparedClaims.json")


def test_a_started_driver_takes_the_claims_over_and_unprepares_them(tmp_path: Path) -> None:
    plugins, cdi = tmp_path / "plugins", tmp_path / "cdi"
    intel_file = plugins / GPU / "preparedClaims.json"
    intel_file.parent.mkdir(parents=True)
    intel_file.write_bytes(versioned({UID_A: [go_device("0000-03-00-0-0x56c0")]}))
    checkpoint = Checkpoint.for_driver(plugins, GPU)

    assert intelcheckpoint.take_over(plugins, GPU, checkpoint) == 1
    assert not intel_file.exists() and intel_file.with_name("preparedClaims.json.imported").exists()
    assert intelcheckpoint.take_over(plugins, GPU, checkpoint) == 0, "set aside: never taken over twice"

    profile = Profile(current=inventory("0000-03-00-0-0x56c0"), driver_name=GPU)

    async def no_reads(namespace: str, name: str) -> dict[str, Any]:
        raise AssertionError("a taken-over claim is answered from the checkpoint")

    async def scenario() -> None:
        service = KubeletService(profile, profile.scan, no_reads, NODE, checkpoint, cdi)
        ref = ClaimRef("ns", "claim", UID_A)
        outcome = (await service.prepare([ref]))[UID_A]
        assert not isinstance(outcome, BaseException), outcome
        assert [d.cdi_device_ids for d in outcome.devices] == [("intel.com/gpu=0000-03-00-0-0x56c0",)]
        assert service.unprepare([ref]) == {UID_A: None}
        assert checkpoint.load() == {}

    asyncio.run(scenario())


def test_a_claim_already_in_the_drivers_checkpoint_keeps_its_own_record(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    checkpoint = Checkpoint.for_driver(plugins, QAT)
    ours = intelcheckpoint.decode(
        unversioned({UID_A: [go_device("ours", cdi="k8s.qat.intel.com/claim")]}), "x"
    )
    checkpoint.update(lambda claims: {**claims, **ours})
    (plugins / QAT / "preparedClaims.json").write_bytes(
        unversioned({UID_A: [go_device("theirs")], UID_B: [go_device("other")]})
    )
    assert intelcheckpoint.take_over(plugins, QAT, checkpoint) == 2
    loaded = checkpoint.load()
    assert loaded[UID_A].devices[0].device == "ours"
    assert loaded[UID_B].devices[0].device == "other"


def test_a_checkpoint_that_cannot_be_read_is_left_in_place_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugins = tmp_path / "plugins"
    intel_file = plugins / GPU / "preparedClaims.json"
    intel_file.parent.mkdir(parents=True)
    intel_file.write_bytes(b'{"kind": "PreparedClaimsCheckpoint", "apiVersion": "x/v9"}')
    checkpoint = Checkpoint.for_driver(plugins, GPU)
    with caplog.at_level(logging.ERROR):
        assert intelcheckpoint.take_over(plugins, GPU, checkpoint) == 0
    assert intel_file.exists(), "nothing is lost"
    assert str(intel_file) in caplog.text and "apiVersion" in caplog.text
    assert checkpoint.load() == {}
    assert intelcheckpoint.take_over(plugins, "npu.intel.com", checkpoint) == 0, "no file: nothing to do"
