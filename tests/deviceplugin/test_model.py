from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.model import (
    AllocationError,
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    Health,
    Mount,
    default_allocation,
    diff_trees,
)


def node(name: str) -> DeviceNode:
    return DeviceNode(f"/dev/{name}", f"/dev/{name}", "rw")


def test_device_info_compares_by_value_even_with_plain_dicts() -> None:
    a = DeviceInfo(nodes=(node("a"),), envs={"X": "1"})
    b = DeviceInfo(nodes=(node("a"),), envs={"X": "1"})
    assert a == b and hash(a) == hash(b)
    assert a != DeviceInfo(nodes=(node("a"),), envs={"X": "2"})


def test_device_info_maps_cannot_be_mutated_through_the_object() -> None:
    envs = {"X": "1"}
    info = DeviceInfo(envs=envs)
    envs["X"] = "changed"
    assert info.envs["X"] == "1"
    with pytest.raises(TypeError):
        info.envs["Y"] = "2"  # type: ignore[index]


def test_diff_reports_added_updated_removed() -> None:
    old: DeviceTree = {"a": {"1": DeviceInfo()}, "b": {"1": DeviceInfo()}, "c": {"1": DeviceInfo()}}
    new: DeviceTree = {
        "a": {"1": DeviceInfo()},
        "b": {"1": DeviceInfo(health=Health.UNHEALTHY)},
        "d": {"1": DeviceInfo()},
    }
    diff = diff_trees(old, new)
    assert set(diff.added) == {"d"}
    assert set(diff.updated) == {"b"}
    assert diff.removed == frozenset({"c"})
    assert not diff.empty


def test_identical_rescan_is_no_change() -> None:
    tree: DeviceTree = {"a": {"1": DeviceInfo(nodes=(node("x"),))}}
    rescanned: DeviceTree = {"a": {"1": DeviceInfo(nodes=(node("x"),))}}
    assert diff_trees(tree, rescanned).empty


def test_type_with_no_devices_is_still_a_type() -> None:
    diff = diff_trees({"a": {"1": DeviceInfo()}}, {"a": {}})
    assert set(diff.updated) == {"a"} and not diff.removed


infos = st.builds(
    DeviceInfo,
    health=st.sampled_from(list(Health)),
    numa_nodes=st.lists(st.integers(0, 3), max_size=2).map(tuple),
)
trees = st.dictionaries(
    st.sampled_from(["i915", "xe", "cy", "dc"]),
    st.dictionaries(st.sampled_from(["d0", "d1", "d2"]), infos, max_size=3),
    max_size=4,
)


@given(trees, trees)
def test_applying_the_diff_to_the_old_tree_gives_the_new_tree(old: DeviceTree, new: DeviceTree) -> None:
    diff = diff_trees(old, new)
    rebuilt = {kind: devices for kind, devices in old.items() if kind not in diff.removed}
    rebuilt.update(diff.added)
    rebuilt.update(diff.updated)
    assert {k: dict(v) for k, v in rebuilt.items()} == {k: dict(v) for k, v in new.items()}
    assert diff.empty == ({k: dict(v) for k, v in old.items()} == {k: dict(v) for k, v in new.items()})


CDI = CdiDevice(kind="intel.cdi.k8s.io/gpu", name="card0")


def test_default_allocation_merges_in_request_order() -> None:
    devices = {
        "a": DeviceInfo(nodes=(node("a"),), mounts=(Mount("/m", "/m"),), envs={"K": "a", "A": "1"}, cdi=CDI),
        "b": DeviceInfo(nodes=(node("b"),), envs={"K": "b"}, annotations={"note": "b"}),
    }
    allocation = default_allocation(devices, ["b", "a"])
    assert allocation.nodes == (node("b"), node("a"))
    assert allocation.mounts == (Mount("/m", "/m"),)
    assert dict(allocation.envs) == {"K": "a", "A": "1"}
    assert dict(allocation.annotations) == {"note": "b"}
    assert allocation.cdi_devices == ("intel.cdi.k8s.io/gpu=card0",)


def test_shared_device_ids_do_not_duplicate_nodes_or_cdi_names() -> None:
    shared = DeviceInfo(nodes=(node("card0"), node("renderD128")), cdi=CDI)
    allocation = default_allocation({"card0-0": shared, "card0-1": shared}, ["card0-0", "card0-1"])
    assert allocation.nodes == (node("card0"), node("renderD128"))
    assert allocation.cdi_devices == ("intel.cdi.k8s.io/gpu=card0",)


def test_unknown_device_is_named_in_the_error() -> None:
    with pytest.raises(AllocationError, match="non-existing device ghost"):
        default_allocation({"a": DeviceInfo()}, ["a", "ghost"])


def test_unhealthy_device_is_refused() -> None:
    with pytest.raises(AllocationError, match="unhealthy device a"):
        default_allocation({"a": DeviceInfo(health=Health.UNHEALTHY)}, ["a"])
