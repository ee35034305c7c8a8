"""ResourceSlices from an inventory, and the plan that publishes them: limits, names, taints, generations."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    HealthIssue,
    HealthTaints,
    Inventory,
    RequestPolicy,
    Severity,
    Taint,
    TaintKeys,
    Version,
)
from intel_device_plugins.dra.slices import (
    DRIVER_LABEL,
    SliceError,
    SlicePlan,
    desired_slices,
    plan,
    slice_name,
    unhealthy_taint,
)

DRIVER = "gpu.intel.com"
NODE = "node-1"
UID = "0f0e0d0c-0000-4000-8000-000000000001"


def gpu(index: int, **kwargs: Any) -> Device:
    """A GPU-like device: typed attributes and shareable capacities, as the GPU driver publishes them."""
    fields: dict[str, Any] = {
        "name": f"card{index}",
        "attributes": {
            "driver": "i915",
            "pciId": "0x56a0",
            "numaNode": index % 2,
            "sriov": "none",
            "firmware": Version("1.2.3"),
            "integrated": False,
            STANDARD_PCI_BUS_ID: f"0000:{index // 256:02x}:{index % 256:02x}.0",
        },
        "capacity": {
            "memory": Capacity("16Gi", RequestPolicy(default="16Gi")),
            "millicores": Capacity("1000", RequestPolicy(default="1000", valid_range_min="1")),
        },
        "allow_multiple_allocations": True,
    }
    fields.update(kwargs)
    return Device(**fields)


def inventory(count: int, **kwargs: Any) -> Inventory:
    return Inventory(devices=tuple(gpu(i) for i in range(count)), **kwargs)


def build(inv: Inventory, generation: int = 0) -> tuple[dict[str, Any], ...]:
    return desired_slices(DRIVER, NODE, UID, inv, generation)


def devices_of(slices: Sequence[Mapping[str, Any]]) -> list[str]:
    return [d["name"] for s in slices for d in s["spec"].get("devices", [])]


class Server:
    """What the API server does with a plan: stores, stamps versions and taint times, and spells
    quantities canonically (``1000`` comes back as ``1k``), so a plan made against its answers is tested
    against what a real server returns."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self._versions = itertools.count(100)

    def _stored(self, obj: Mapping[str, Any], uid: str) -> dict[str, Any]:
        out = copy.deepcopy(dict(obj))
        out["metadata"] = {**out["metadata"], "uid": uid, "resourceVersion": str(next(self._versions))}
        out["metadata"]["managedFields"] = [{"manager": "test"}]
        for device in out["spec"].get("devices", []):
            for cap in device.get("capacity", {}).values():
                if cap["value"] == "1000":
                    cap["value"] = "1k"
                if cap.get("requestPolicy", {}).get("default") == "1000":
                    cap["requestPolicy"]["default"] = "1k"
            for taint in device.get("taints", []):
                taint.setdefault("timeAdded", f"2026-11-26T00:00:{next(self._versions) % 60:02d}Z")
        if out["spec"].get("devices") == []:
            del out["spec"]["devices"]  # omitempty
        return out

    def apply(self, todo: SlicePlan) -> None:
        for name in todo.deletes:
            del self.objects[name]
        for obj in todo.updates:
            name = obj["metadata"]["name"]
            held = self.objects[name]
            assert obj["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
            assert "managedFields" not in obj["metadata"]
            self.objects[name] = self._stored(obj, held["metadata"]["uid"])
        for obj in todo.creates:
            name = obj["metadata"]["name"]
            assert name not in self.objects
            self.objects[name] = self._stored(obj, f"uid-{name}")

    def publish(self, inv: Inventory) -> SlicePlan:
        todo = plan(self.objects.values(), build(inv))
        self.apply(todo)
        return todo


# --- building ------------------------------------------------------------------------------------------


def test_200_devices_fill_two_slices_of_one_pool_owned_by_the_node() -> None:
    slices = build(inventory(200))
    assert [s["metadata"]["name"] for s in slices] == ["node-1-gpu-intel-com-0", "node-1-gpu-intel-com-1"]
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 72]
    assert sorted(devices_of(slices)) == sorted(f"card{i}" for i in range(200))
    for s in slices:
        assert s["apiVersion"] == "resource.k8s.io/v1"
        assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == NODE
        assert s["spec"]["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 2}
        assert s["metadata"]["labels"] == {DRIVER_LABEL: DRIVER}
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": UID, "controller": True}
        ]


def test_attributes_are_typed_and_standard_names_kept() -> None:
    (s,) = build(inventory(1))
    (device,) = s["spec"]["devices"]
    assert device["attributes"]["numaNode"] == {"int": 0}
    assert device["attributes"]["integrated"] == {"bool": False}
    assert device["attributes"]["firmware"] == {"version": "1.2.3"}
    assert device["attributes"]["driver"] == {"string": "i915"}
    assert device["attributes"][STANDARD_PCI_BUS_ID] == {"string": "0000:00:00.0"}
    assert device["capacity"]["millicores"] == {
        "value": "1000",
        "requestPolicy": {"default": "1000", "validRange": {"min": "1"}},
    }
    assert device["allowMultipleAllocations"] is True
    assert "taints" not in device


def test_unhealthy_device_is_tainted_with_its_message_as_a_label_value() -> None:
    sick = gpu(0, health=Health.UNHEALTHY, health_message="GPU reset failed: temperature 105°C (limit 100)")
    (s,) = build(Inventory(devices=(sick, gpu(1))))
    tainted, healthy = s["spec"]["devices"]
    assert tainted["taints"] == [
        {
            "key": "gpu.intel.com/unhealthy",
            "effect": "NoSchedule",
            "value": "GPU-reset-failed-temperature-105-C-limit-100",
        }
    ]
    assert "taints" not in healthy
    long = unhealthy_taint(DRIVER, "x" * 100 + "!")
    assert long.value == "x" * 63
    assert unhealthy_taint(DRIVER, "...").value == ""


INTEL_TAINTS = HealthTaints(keys=TaintKeys.CATEGORIES, critical="NoExecute", warning="NoSchedule")


def _taints(device: Device, policy: HealthTaints) -> list[dict[str, Any]]:
    (s,) = desired_slices(DRIVER, NODE, UID, Inventory(devices=(device,), health_taints=policy))
    return list(s["spec"]["devices"][0].get("taints", []))


def test_health_issues_become_one_valueless_taint_per_effect_keyed_by_their_categories() -> None:
    sick = gpu(
        0,
        health=Health.UNHEALTHY,
        health_issues=(
            HealthIssue("Temperature", Severity.WARNING, "95 C"),
            HealthIssue("DeviceNodesMissing", Severity.CRITICAL, "renderD128 gone"),
            HealthIssue("Memory", Severity.WARNING),
            HealthIssue("DeviceAbsent", Severity.CRITICAL),
        ),
    )

    assert _taints(sick, INTEL_TAINTS) == [  # effects in the order the issues first name them
        {"key": "HealthIssues-Memory_Temperature", "effect": "NoSchedule"},
        {"key": "HealthIssues-DeviceAbsent_DeviceNodesMissing", "effect": "NoExecute"},
    ]
    same_effect = HealthTaints(keys=TaintKeys.CATEGORIES, critical="NoSchedule", warning="NoSchedule")
    assert _taints(sick, same_effect) == [
        {"key": "HealthIssues-DeviceAbsent_DeviceNodesMissing_Memory_Temperature", "effect": "NoSchedule"}
    ]


def test_the_driver_key_scheme_carries_the_messages_and_is_the_default() -> None:
    sick = gpu(
        0,
        health=Health.UNHEALTHY,
        health_issues=(
            HealthIssue("Temperature", Severity.WARNING, "too hot"),
            HealthIssue("DeviceNodesMissing", Severity.CRITICAL, "renderD128 gone"),
        ),
    )
    policy = HealthTaints(critical="NoExecute")

    assert Inventory().health_taints == HealthTaints(TaintKeys.DRIVER, "NoSchedule", "NoSchedule")
    assert _taints(sick, policy) == [
        {"key": "gpu.intel.com/unhealthy", "effect": "NoSchedule", "value": "too-hot"},
        {"key": "gpu.intel.com/unhealthy", "effect": "NoExecute", "value": "renderD128-gone"},
    ]


def test_an_unhealthy_device_without_issues_has_one_critical_issue() -> None:
    sick = gpu(0, health=Health.UNHEALTHY, health_message="gone")

    assert _taints(sick, INTEL_TAINTS) == [{"key": "HealthIssues-Unhealthy", "effect": "NoExecute"}]
    assert _taints(gpu(1), INTEL_TAINTS) == []


def test_a_warning_on_a_healthy_device_taints_it_and_long_categories_are_cut_to_a_label_name() -> None:
    warned = gpu(0, health_issues=(HealthIssue("Fan", Severity.WARNING),))
    crowded = gpu(
        1, health=Health.UNHEALTHY, health_issues=tuple(HealthIssue(f"Category{i}") for i in range(9))
    )

    assert _taints(warned, INTEL_TAINTS) == [{"key": "HealthIssues-Fan", "effect": "NoSchedule"}]
    (taint,) = _taints(crowded, INTEL_TAINTS)
    assert len(taint["key"]) <= 63 and taint["key"].startswith("HealthIssues-Category0_Category1")


def test_a_tainted_or_partitioned_device_limits_its_slice_to_64() -> None:
    devices = [gpu(i) for i in range(200)]
    devices[0] = gpu(0, health=Health.UNHEALTHY)
    slices = build(Inventory(devices=tuple(devices)))
    # Sorted by name, card0 comes first: its slice holds 64, the healthy rest fill 128 and the remainder.
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 128, 8]


def test_counter_sets_go_first_in_slices_of_their_own() -> None:
    sets = tuple(CounterSet(f"gpu{i}", {"memory": "16Gi"}) for i in range(9))
    vf = gpu(0, consumes_counters=(CounterConsumption("gpu3", {"memory": "4Gi"}),))
    slices = build(Inventory(devices=(vf,), counter_sets=sets))
    assert [list(s["spec"]) for s in slices] == [["driver", "nodeName", "pool", key] for key in
                                                 ("sharedCounters", "sharedCounters", "devices")]  # fmt: skip
    assert [len(s["spec"]["sharedCounters"]) for s in slices[:2]] == [8, 1]
    assert slices[0]["spec"]["sharedCounters"][0] == {
        "name": "gpu0",
        "counters": {"memory": {"value": "16Gi"}},
    }
    assert slices[2]["spec"]["devices"][0]["consumesCounters"] == [
        {"counterSet": "gpu3", "counters": {"memory": {"value": "4Gi"}}}
    ]
    assert all(s["spec"]["pool"]["resourceSliceCount"] == 3 for s in slices)


def test_devices_are_listed_as_people_count_them() -> None:
    (s,) = build(Inventory(devices=(gpu(10), gpu(2), gpu(1))))
    assert [d["name"] for d in s["spec"]["devices"]] == ["card1", "card2", "card10"]


def test_no_devices_is_one_empty_slice() -> None:
    (s,) = build(Inventory())
    assert s["spec"]["devices"] == [] and s["spec"]["pool"]["resourceSliceCount"] == 1


def test_a_long_node_name_gives_valid_distinct_slice_names() -> None:
    a, b = "n" * 250 + "a", "n" * 250 + "b"
    names = {slice_name(DRIVER, node, 12345) for node in (a, b)}
    assert len(names) == 2
    assert all(len(n) <= 253 and n.endswith("-gpu-intel-com-12345") for n in names)
    assert slice_name(DRIVER, NODE, 3) == "node-1-gpu-intel-com-3"


@pytest.mark.parametrize(
    ("device", "counter_sets", "named"),
    [
        (gpu(0, name="Card_0"), (), "device 'Card_0': the name is not a DNS label"),
        (gpu(0, attributes={f"a{i}": i for i in range(31)}), (), "33 attributes and capacities"),
        (gpu(0, attributes={"model": "x" * 65}), (), "attribute model is 65 characters long"),
        (gpu(0, attributes={"fw": Version("1.2")}), (), "attribute fw = '1.2' is not a semantic version"),
        (gpu(0, attributes={"bad name": 1}), (), "'bad name' does not end in a C identifier"),
        (
            gpu(0, attributes={"Bad_Domain/x": 1}),
            (),
            "'Bad_Domain/x' has a domain that is not a DNS subdomain",
        ),
        (
            gpu(0, attributes={"big": 2**63}),
            (),
            "attribute big = 9223372036854775808 does not fit in 64 bits",
        ),
        (gpu(0, capacity={"memory": Capacity("lots")}), (), "device 'card0': capacity memory: 'lots' is not"),
        (gpu(0, allow_multiple_allocations=False), (), "capacity memory has a request policy,"),
        (
            gpu(0, capacity={"m": Capacity("1", RequestPolicy("1", ("1",), "1"))}),
            (),
            "both validValues and validRange",
        ),
        (gpu(0, taints=(Taint("k", "Sometimes"),)), (), "taint k effect 'Sometimes' is not one of"),
        (gpu(0, taints=(Taint("a b"),)), (), "taint key 'a b' is not a label name"),
        (gpu(0, taints=tuple(Taint(f"k{i}") for i in range(17))), (), "17 taints, at most 16"),
        (
            gpu(0, consumes_counters=(CounterConsumption("gone", {"memory": "1"}),)),
            (),
            "consumes from counter set 'gone', which the inventory does not have",
        ),
        (
            gpu(0, consumes_counters=(CounterConsumption("pf", {"cores": "1"}),)),
            (CounterSet("pf", {"memory": "1"}),),
            "counters ['cores'] are not in counter set 'pf'",
        ),
        (gpu(0), (CounterSet("PF", {"memory": "1"}),), "counter set 'PF': the name is not a DNS label"),
        (gpu(0), (CounterSet("pf", {}),), "counter set 'pf': no counters"),
    ],
)
def test_what_the_api_server_would_refuse_is_refused_naming_device_and_field(
    device: Device, counter_sets: tuple[CounterSet, ...], named: str
) -> None:
    with pytest.raises(SliceError) as refused:
        build(Inventory(devices=(device,), counter_sets=counter_sets))
    assert named in str(refused.value)


def test_duplicate_devices_bad_driver_node_and_uid_are_refused() -> None:
    with pytest.raises(SliceError, match="device 'card0': listed twice"):
        build(Inventory(devices=(gpu(0), gpu(0))))
    with pytest.raises(SliceError, match="driver name 'GPU'"):
        desired_slices("GPU", NODE, UID, Inventory())
    with pytest.raises(SliceError, match="node name 'Node_1'"):
        desired_slices(DRIVER, "Node_1", UID, Inventory())
    with pytest.raises(SliceError, match="node node-1: no UID"):
        desired_slices(DRIVER, NODE, "", Inventory())


# --- planning ------------------------------------------------------------------------------------------


def test_first_publish_creates_every_slice_at_generation_one_and_again_is_a_no_op() -> None:
    server = Server()
    first = server.publish(inventory(200))
    assert (len(first.creates), first.updates, first.deletes, first.generation) == (2, (), (), 1)
    # The server wrote 1000 as 1k, stamped versions and fields: still no difference.
    assert server.publish(inventory(200)).empty


def test_one_changed_device_is_one_update_at_the_same_generation() -> None:
    server = Server()
    server.publish(inventory(200))
    changed = list(inventory(200).devices)
    changed[150] = gpu(150, attributes={"driver": "xe"})
    todo = server.publish(Inventory(devices=tuple(changed)))
    assert (len(todo.updates), todo.creates, todo.deletes, todo.generation) == (1, (), (), 1)
    (update,) = todo.updates
    assert update["metadata"]["name"] == "node-1-gpu-intel-com-1"
    assert {o["spec"]["pool"]["generation"] for o in server.objects.values()} == {1}


def test_changes_in_two_slices_bump_the_generation_in_all() -> None:
    server = Server()
    server.publish(inventory(200))
    changed = list(inventory(200).devices)
    changed[1] = gpu(1, attributes={"driver": "xe"})
    changed[199] = gpu(199, attributes={"driver": "xe"})
    todo = server.publish(Inventory(devices=tuple(changed)))
    assert (len(todo.updates), todo.generation) == (2, 2)
    assert {o["spec"]["pool"]["generation"] for o in server.objects.values()} == {2}


def test_growing_by_a_slice_bumps_and_shrinking_deletes() -> None:
    server = Server()
    server.publish(inventory(100))
    grown = server.publish(inventory(130))
    assert (len(grown.updates), len(grown.creates), grown.generation) == (1, 1, 2)
    assert {o["spec"]["pool"]["generation"] for o in server.objects.values()} == {2}
    shrunk = server.publish(inventory(3))
    assert shrunk.deletes == ("node-1-gpu-intel-com-1",)
    assert [o["spec"]["pool"]["resourceSliceCount"] for o in server.objects.values()] == [1]


def test_foreign_stale_and_misplaced_slices_are_deleted_or_brought_up_to_date() -> None:
    server = Server()
    server.publish(inventory(2))
    (ours,) = server.objects.values()
    stray = copy.deepcopy(ours)
    stray["metadata"]["name"] = "node-1-gpu-intel-com-7"
    wrong_pool = copy.deepcopy(ours)
    wrong_pool["metadata"]["name"] = "node-1-gpu-intel-com-0"
    wrong_pool["spec"]["pool"]["name"] = "elsewhere"
    todo = plan([stray, wrong_pool], build(inventory(2)))
    # The pool name is immutable: that slice is deleted and made again.
    assert todo.deletes == ("node-1-gpu-intel-com-0", "node-1-gpu-intel-com-7")
    assert [c["metadata"]["name"] for c in todo.creates] == ["node-1-gpu-intel-com-0"]


def test_edited_metadata_is_restored_and_other_labels_kept() -> None:
    server = Server()
    server.publish(inventory(2))
    (name,) = server.objects
    server.objects[name]["metadata"]["labels"] = {"team": "a"}
    server.objects[name]["metadata"]["ownerReferences"] = []
    (update,) = server.publish(inventory(2)).updates
    assert update["metadata"]["labels"] == {"team": "a", DRIVER_LABEL: DRIVER}
    assert update["metadata"]["ownerReferences"][0]["uid"] == UID


def test_a_taint_that_stays_keeps_the_time_the_server_stamped() -> None:
    server = Server()
    sick = Inventory(devices=(gpu(0, health=Health.UNHEALTHY, health_message="hot"), gpu(1)))
    server.publish(sick)
    (name,) = server.objects
    stamped = server.objects[name]["spec"]["devices"][0]["taints"][0]["timeAdded"]
    worse = Inventory(devices=(sick.devices[0], gpu(1, health=Health.UNHEALTHY, health_message="hot")))
    (update,) = server.publish(worse).updates
    assert update["spec"]["devices"][0]["taints"][0]["timeAdded"] == stamped
    assert "timeAdded" not in update["spec"]["devices"][1]["taints"][0]


def test_a_wanted_generation_above_the_servers_is_taken() -> None:
    server = Server()
    server.publish(inventory(1))
    todo = plan(server.objects.values(), build(inventory(1), generation=7))
    assert (todo.generation, len(todo.updates)) == (7, 1)


# --- invariants ----------------------------------------------------------------------------------------


@st.composite
def inventories(draw: st.DrawFn) -> Inventory:
    count = draw(st.integers(0, 300))
    sets = tuple(CounterSet(f"pf{i}", {"memory": "8Gi"}) for i in range(draw(st.integers(0, 10))))
    devices = []
    for i in range(count):
        kind = draw(st.sampled_from(("plain", "plain", "plain", "sick", "vf", "xe")))
        if kind == "sick":
            devices.append(gpu(i, health=Health.UNHEALTHY, health_message=draw(st.text(max_size=80))))
        elif kind == "vf" and sets:
            cs = sets[i % len(sets)].name
            devices.append(gpu(i, consumes_counters=(CounterConsumption(cs, {"memory": "1Gi"}),)))
        elif kind == "xe":
            devices.append(gpu(i, attributes={"driver": "xe"}))
        else:
            devices.append(gpu(i))
    order = draw(st.permutations(range(count)))
    return Inventory(devices=tuple(devices[j] for j in order), counter_sets=sets)


@settings(max_examples=60, deadline=None)
@given(inventories())
def test_every_device_lands_in_exactly_one_slice_within_the_limits(inv: Inventory) -> None:
    slices = build(inv)
    assert sorted(devices_of(slices)) == sorted(d.name for d in inv.devices)
    names = [s["metadata"]["name"] for s in slices]
    assert len(set(names)) == len(names)
    for s in slices:
        spec = s["spec"]
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        assert not ("devices" in spec and "sharedCounters" in spec)
        devices = spec.get("devices", [])
        advanced = any("taints" in d or "consumesCounters" in d for d in devices)
        assert len(devices) <= (64 if advanced else 128)
        assert len(spec.get("sharedCounters", [])) <= 8
    counted = [cs["name"] for s in slices for cs in s["spec"].get("sharedCounters", [])]
    assert sorted(counted) == sorted(cs.name for cs in inv.counter_sets)


@settings(max_examples=60, deadline=None)
@given(inventories(), inventories())
def test_generation_moves_only_on_change_and_a_second_plan_is_empty(
    before: Inventory, after: Inventory
) -> None:
    server = Server()
    first = server.publish(before)
    assert first.generation == 1 and len(first.creates) == len(server.objects)
    assert server.publish(before).empty
    todo = server.publish(after)
    if build(before) == build(after):
        assert todo.empty and todo.generation == 1
    else:
        assert not todo.empty
        multi = bool(todo.creates) or len(todo.updates) > 1
        assert todo.generation == (2 if multi else 1)
    # The server now holds exactly the desired content, all slices at one generation.
    assert server.publish(after).empty
    assert len({o["spec"]["pool"]["generation"] for o in server.objects.values()}) == 1
    want = {s["metadata"]["name"]: s["spec"].get("devices", []) for s in build(after)}
    held = {n: [d["name"] for d in o["spec"].get("devices", [])] for n, o in server.objects.items()}
    assert held == {n: [d["name"] for d in ds] for n, ds in want.items()}
