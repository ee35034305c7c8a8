"""The pure prepare core: one spec per claim, CDI IDs per result, missing and sick devices named."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.model import CdiDevice, Health
from intel_device_plugins.dra.model import AllocatedDevice, ClaimRef, Device, Inventory, PreparedDevice
from intel_device_plugins.dra.prepare import files_to_remove, plan_prepare, spec_file_name
from intel_device_plugins.dra.profile import ClaimPreparationError
from tests.dra.draclaims import DRIVER, NODE, Profile, device, inventory

UID = "3f2c"
REF = ClaimRef("ns", "claim", UID)
KIND = f"k8s.{DRIVER}/claim"


def _allocated(*names: str, **extra: object) -> tuple[AllocatedDevice, ...]:
    return tuple(AllocatedDevice(request="gpu", pool=NODE, device=name, **extra) for name in names)  # type: ignore[arg-type]


def test_one_spec_for_the_claim_with_renamed_devices_and_env() -> None:
    plan = plan_prepare(Profile(), REF, _allocated("card1", "card0"), inventory("card0", "card1"))
    assert plan.spec_file == f"k8s.{DRIVER}-claim_{UID}.json" == spec_file_name(DRIVER, UID)
    assert plan.spec is not None and plan.spec["kind"] == KIND
    assert [d["name"] for d in plan.spec["devices"]] == [f"{UID}-card1", f"{UID}-card0"]
    edits = plan.spec["devices"][0]["containerEdits"]
    assert edits["env"] == ["DEVICE_CARD1=1"]
    assert edits["deviceNodes"] == [
        {"path": "/dev/dri/card1", "hostPath": "/dev/dri/card1", "permissions": "rw"}
    ]
    assert plan.prepared.claim == REF and plan.prepared.cdi_spec_files == (plan.spec_file,)
    assert plan.prepared.devices == (
        PreparedDevice(("gpu",), NODE, "card1", (f"{KIND}={UID}-card1",)),
        PreparedDevice(("gpu",), NODE, "card0", (f"{KIND}={UID}-card0",)),
    )


def test_shares_of_one_device_get_one_cdi_device_and_their_own_answers() -> None:
    allocated = (
        AllocatedDevice(request="a", pool=NODE, device="card0", share_id="s1"),
        AllocatedDevice(request="b", pool=NODE, device="card0", share_id="s2"),
    )
    plan = plan_prepare(Profile(), REF, allocated, inventory("card0"))
    assert plan.spec is not None and len(plan.spec["devices"]) == 1
    assert [(d.requests, d.share_id, d.cdi_device_ids) for d in plan.prepared.devices] == [
        (("a",), "s1", (f"{KIND}={UID}-card0",)),
        (("b",), "s2", (f"{KIND}={UID}-card0",)),
    ]


def test_claim_without_devices_writes_nothing() -> None:
    plan = plan_prepare(Profile(), REF, (), inventory("card0"))
    assert plan.spec_file is None and plan.spec is None
    assert plan.prepared.devices == () and plan.prepared.cdi_spec_files == ()


def test_a_device_is_found_by_its_former_name_unless_another_device_has_that_name() -> None:
    renamed = replace(device("0000-03-00-0-0x56c0"), former_name="card0")
    other = device("card0")

    plan = plan_prepare(Profile(), REF, _allocated("card0"), Inventory(devices=(renamed,)))
    shadowed = plan_prepare(Profile(), REF, _allocated("card0"), Inventory(devices=(renamed, other)))

    assert plan.spec is not None and plan.spec["devices"][0]["name"] == f"{UID}-card0"
    assert plan.spec["devices"][0]["containerEdits"]["env"] == ["DEVICE_0000-03-00-0-0X56C0=1"]
    assert shadowed.spec is not None and shadowed.spec["devices"][0]["containerEdits"]["env"] == [
        "DEVICE_CARD0=1"
    ]
    assert Inventory(devices=(renamed,)).by_name().keys() == {"0000-03-00-0-0x56c0"}


def test_admin_access_gets_the_devices_admin_edits_a_workload_its_own() -> None:
    watched = replace(
        device("card0"), admin_cdi=CdiDevice(kind="unused/kind", name="card0", env=("MONITOR=1",))
    )
    inventory_ = Inventory(devices=(watched,))

    admin = plan_prepare(Profile(), REF, _allocated("card0", admin_access=True), inventory_)
    workload = plan_prepare(Profile(), REF, _allocated("card0"), inventory_)

    assert admin.spec is not None and admin.spec["devices"][0]["containerEdits"]["env"] == ["MONITOR=1"]
    assert workload.spec is not None
    assert workload.spec["devices"][0]["containerEdits"]["env"] == ["DEVICE_CARD0=1"]


def test_vanished_device_is_named() -> None:
    with pytest.raises(
        ClaimPreparationError, match=r"ns/claim: device card7 of driver gpu.example.com is not on"
    ):
        plan_prepare(Profile(), REF, _allocated("card0", "card7"), inventory("card0"))


def test_unhealthy_device_is_named_with_its_reason_unless_admin_access() -> None:
    sick = Inventory(devices=(device("card0", Health.UNHEALTHY, "GPU hang"),))
    with pytest.raises(
        ClaimPreparationError, match=r"device card0 of driver gpu.example.com is unhealthy: GPU hang"
    ):
        plan_prepare(Profile(), REF, _allocated("card0"), sick)
    monitor = plan_prepare(Profile(), REF, _allocated("card0", admin_access=True), sick)
    assert [d.device for d in monitor.prepared.devices] == ["card0"]


class _WrongKind(Profile):
    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return [CdiDevice(kind="other/kind", name=f"{claim_uid}-{r.device}") for r, _ in allocated]


def test_profile_edits_of_another_kind_are_refused() -> None:
    with pytest.raises(ClaimPreparationError, match=r"CDI device for card0 has kind other/kind"):
        plan_prepare(_WrongKind(), REF, _allocated("card0"), inventory("card0"))


def test_device_without_container_edits_is_named() -> None:
    bare = Inventory(devices=(Device(name="card0"),))
    with pytest.raises(
        ClaimPreparationError, match=r"device card0 of driver gpu.example.com has no container"
    ):
        plan_prepare(Profile(), REF, _allocated("card0"), bare)


def test_unprepare_removes_recorded_and_deterministic_names() -> None:
    plan = plan_prepare(Profile(), REF, _allocated("card0"), inventory("card0"))
    assert files_to_remove(DRIVER, UID, plan.prepared) == (spec_file_name(DRIVER, UID),)
    assert files_to_remove(DRIVER, UID, None) == (spec_file_name(DRIVER, UID),)


@given(st.lists(st.sampled_from(["card0", "card1", "card2", "card3"]), max_size=8))
def test_every_result_answered_every_device_once(names: list[str]) -> None:
    plan = plan_prepare(Profile(), REF, _allocated(*names), inventory("card0", "card1", "card2", "card3"))
    assert [d.device for d in plan.prepared.devices] == names
    spec_names = [d["name"] for d in plan.spec["devices"]] if plan.spec else []
    assert spec_names == [f"{UID}-{name}" for name in dict.fromkeys(names)]
    for answer in plan.prepared.devices:
        assert answer.cdi_device_ids == (f"{KIND}={UID}-{answer.device}",)
