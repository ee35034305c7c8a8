"""The webhook's DeviceClass sync: the pure plan converges from any state and touches only its own
classes; the shell applies it through a client and waits for the objects to be listed first."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lightkube import AsyncClient

from intel_device_plugins.webhooks import cli
from intel_device_plugins.webhooks.classsync import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    ClassPlan,
    ClassSync,
    desired_classes,
    is_managed,
    plan,
)
from intel_device_plugins.webhooks.fpgaclasses import generate
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore
from tests.webhooks.podfixtures import IFACE, IFACE_D5005, NLB0, NLB3, af, region

AF, RG = FpgaKind.ACCELERATOR_FUNCTION, FpgaKind.FPGA_REGION
DESIRED = desired_classes(
    generate(
        [(AF, af("a")), (AF, af("b", afu=NLB3)), (RG, region("r")), (RG, region("d", iface=IFACE_D5005))]
    )
)
NAMES = [str(d["metadata"]["name"]) for d in DESIRED]


def cls(name: str, managed: bool, spec: dict[str, Any] | None = None, version: str = "1") -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY} if managed else {"team": "x"}
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": version},
        "spec": spec if spec is not None else {"selectors": []},
    }


def apply(state: dict[str, dict[str, Any]], todo: ClassPlan) -> dict[str, dict[str, Any]]:
    """What the API server would hold after the plan."""
    out = copy.deepcopy(state)
    for doc in todo.create:
        assert doc["metadata"]["name"] not in out, "create of an existing name"
        out[doc["metadata"]["name"]] = copy.deepcopy(doc)
    for doc in todo.update:
        assert is_managed(out[doc["metadata"]["name"]]), "update of a class not managed"
        out[doc["metadata"]["name"]] = copy.deepcopy(doc)
    for name in todo.delete:
        assert is_managed(out.pop(name)), "delete of a class not managed"
    return out


def test_stale_edited_missing_and_foreign_classes() -> None:
    existing = [
        cls("af-old.fpga.intel.com", managed=True),  # no object asks for it any more
        {**copy.deepcopy(DESIRED[0]), "spec": {"selectors": []}},  # edited by hand
        cls(NAMES[1], managed=False),  # applied by someone else under a wanted name
        cls("gpu.intel.com", managed=False),
    ]
    existing[1]["metadata"]["resourceVersion"] = "7"
    todo = plan(existing, DESIRED, may_delete=True)
    assert [d["metadata"]["name"] for d in todo.create] == NAMES[2:]
    assert [(d["metadata"]["name"], d["metadata"]["resourceVersion"]) for d in todo.update] == [
        (NAMES[0], "7")
    ]
    assert todo.delete == ("af-old.fpga.intel.com",)
    assert todo.conflicts == (NAMES[1],)
    after = apply({o["metadata"]["name"]: o for o in existing}, todo)
    assert plan(after.values(), DESIRED, may_delete=True) == ClassPlan(conflicts=(NAMES[1],))


def test_nothing_is_deleted_before_the_objects_are_known() -> None:
    todo = plan([cls("af-old.fpga.intel.com", managed=True)], DESIRED, may_delete=False)
    assert todo.delete == () and len(todo.create) == len(DESIRED)


def test_a_label_removed_by_hand_is_put_back() -> None:
    edited = copy.deepcopy(DESIRED[0])
    edited["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY}  # part-of dropped
    assert [d["metadata"]["name"] for d in plan([edited], DESIRED[:1], True).update] == NAMES[:1]


names = st.sampled_from([*NAMES, "af-x.fpga.intel.com", "other.example.com"])
state: st.SearchStrategy[dict[str, tuple[bool, dict[str, Any] | None]]] = st.dictionaries(
    names,
    st.tuples(st.booleans(), st.sampled_from([None, {"selectors": []}, {"extendedResourceName": "x/y"}])),
)


@given(state, st.sets(st.sampled_from(range(len(DESIRED)))))
def test_from_any_state_one_round_converges_and_foreign_classes_stay(
    existing: dict[str, tuple[bool, dict[str, Any] | None]], wanted: set[int]
) -> None:
    before = {}
    for name, (managed, spec) in existing.items():
        match = next((d for d in DESIRED if d["metadata"]["name"] == name), None)
        before[name] = (
            copy.deepcopy(match) if managed and spec is None and match else cls(name, managed, spec)
        )
    desired = [DESIRED[i] for i in sorted(wanted)]
    after = apply(before, plan(before.values(), desired, may_delete=True))
    assert plan(after.values(), desired, may_delete=True).empty
    for name, obj in before.items():
        if not is_managed(obj):
            assert after[name] == obj, f"foreign class {name} changed"
    managed_after = {n for n, o in after.items() if is_managed(o)}
    assert managed_after == {d["metadata"]["name"] for d in desired} - {
        n for n, o in before.items() if not is_managed(o)
    }


class FakeClient:
    """DeviceClasses held in a dict; records every write."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.writes: list[tuple[str, str]] = []

    async def list(self, res: Any, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for obj in list(self.objects.values()):
            yield copy.deepcopy(obj)

    async def watch(self, res: Any, **_: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield ("", {})  # never reached

    async def create(self, obj: Any) -> None:
        doc = obj.to_dict()
        self.writes.append(("create", doc["metadata"]["name"]))
        self.objects[doc["metadata"]["name"]] = doc

    async def replace(self, obj: Any) -> None:
        doc = obj.to_dict()
        self.writes.append(("update", doc["metadata"]["name"]))
        self.objects[doc["metadata"]["name"]] = doc

    async def delete(self, res: Any, name: str) -> None:
        self.writes.append(("delete", name))
        del self.objects[name]


async def test_the_shell_waits_for_both_listings_then_follows_the_objects() -> None:
    client = FakeClient([cls("af-old.fpga.intel.com", managed=True), cls("gpu.intel.com", managed=False)])
    wake = asyncio.Event()
    store = MappingStore(on_change=wake.set)
    sync = ClassSync(cast(AsyncClient, client), store, wake, resync_s=30)
    task = asyncio.create_task(sync.run(retry_s=0.01))
    try:
        store.replace(AF, [af("a", ns="x"), af("a", ns="y")])
        await asyncio.sleep(0.05)
        assert client.writes == [], "nothing before the FpgaRegions are listed too"
        store.replace(RG, [region("r")])
        await asyncio.sleep(0.05)
        assert sorted(client.writes) == sorted(
            [
                ("create", f"af-{IFACE}.{NLB0}.fpga.intel.com"),
                ("create", f"region-{IFACE}.fpga.intel.com"),
                ("delete", "af-old.fpga.intel.com"),
            ]
        )
        store.delete(RG, region("r"))
        await asyncio.sleep(0.05)
        assert client.writes[-1] == ("delete", f"region-{IFACE}.fpga.intel.com")
        assert set(client.objects) == {"gpu.intel.com", f"af-{IFACE}.{NLB0}.fpga.intel.com"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_flag_is_opt_in_go_style_and_fpga_only() -> None:
    fpga = cli.parser(cli.FPGA_PROGRAM)
    assert fpga.parse_args([]).manage_deviceclasses is False
    for spelling in (["-manage-deviceclasses"], ["--manage-deviceclasses"], ["-manage-deviceclasses=true"]):
        assert fpga.parse_args(spelling).manage_deviceclasses is True, spelling
    assert fpga.parse_args(["--manage-deviceclasses=false"]).manage_deviceclasses is False
    with pytest.raises(SystemExit):
        cli.parser("intel_sgx_admissionwebhook").parse_args(["--manage-deviceclasses"])
