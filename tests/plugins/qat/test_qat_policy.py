"""QAT preferred-allocation policies and per-container environment."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.allocation import check_preferred
from intel_device_plugins.deviceplugin.model import DeviceInfo, default_allocation
from intel_device_plugins.plugins.qat.policy import (
    Policy,
    balanced_key,
    container_envs,
    preferred_allocation,
    renumber,
)

ADDRESSES = st.builds(
    lambda bus, dev, fn: f"0000:{bus:02x}:{dev:02x}.{fn}",
    st.integers(0x10, 0x1F),
    st.integers(0, 3),
    st.integers(0, 7),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    available = draw(st.lists(ADDRESSES, max_size=24, unique=True))
    must = draw(st.lists(st.sampled_from(available), unique=True)) if available else []
    size = draw(st.integers(0, len(available) + 3))
    return available, must, size


@given(st.sampled_from(list(Policy)), requests())
def test_every_answer_is_acceptable_to_the_kubelet(
    policy: Policy, request: tuple[list[str], list[str], int]
) -> None:
    available, must, size = request
    answer = preferred_allocation(policy, available, must, max(size, len(must)))
    assert check_preferred(answer, available, must, max(size, len(must))).problem == ""


@given(st.sampled_from(list(Policy)), requests())
def test_must_include_ids_come_first(policy: Policy, request: tuple[list[str], list[str], int]) -> None:
    available, must, size = request
    answer = preferred_allocation(policy, available, must, size)
    assert answer[: min(len(must), size)] == must[:size]


@given(requests())
def test_none_keeps_the_kubelet_order(request: tuple[list[str], list[str], int]) -> None:
    available, _, size = request
    assert preferred_allocation(Policy.NONE, available, [], size) == available[:size]


@given(requests())
def test_packed_takes_the_lowest_addresses(request: tuple[list[str], list[str], int]) -> None:
    available, _, size = request
    assert preferred_allocation(Policy.PACKED, available, [], size) == sorted(available)[:size]


@given(st.integers(2, 6), st.integers(1, 8), st.data())
def test_balanced_spreads_evenly_over_pfs(pfs: int, vfs_per_pf: int, data: st.DataObject) -> None:
    available = [
        f"0000:{0x10 + pf:02x}:{(vf + 1) // 8:02x}.{(vf + 1) % 8}"
        for pf in range(pfs)
        for vf in range(vfs_per_pf)
    ]
    shuffled = data.draw(st.permutations(available))
    size = data.draw(st.integers(1, len(available)))
    answer = preferred_allocation(Policy.BALANCED, shuffled, [], size)
    per_pf = Counter(device_id.split(":")[1] for device_id in answer)
    counts = [per_pf.get(f"{0x10 + pf:02x}", 0) for pf in range(pfs)]
    assert max(counts) - min(counts) <= 1


def test_balanced_example_alternates_pfs() -> None:
    available = ["0000:10:00.1", "0000:10:00.2", "0000:11:00.1", "0000:11:00.2"]
    assert preferred_allocation(Policy.BALANCED, available, [], 2) == ["0000:10:00.1", "0000:11:00.1"]
    assert preferred_allocation(Policy.PACKED, available, [], 2) == ["0000:10:00.1", "0000:10:00.2"]


def test_balanced_key_reverses_the_address_fields() -> None:
    assert balanced_key("0000:6b:00.1") == ("00.1", "6b", "0000")


def test_oversized_requests_yield_everything_offered_instead_of_failing() -> None:
    assert preferred_allocation(Policy.PACKED, ["b", "a"], [], 5) == ["a", "b"]


def test_must_include_ids_that_were_not_offered_are_ignored() -> None:
    assert preferred_allocation(Policy.NONE, ["a", "b"], ["z"], 1) == ["a"]


def test_container_envs_number_the_devices_in_request_order() -> None:
    envs = container_envs({"QAT7": "x", "OTHER": "kept"}, ["0000:11:00.1", "0000:10:00.1"])
    assert envs == {"QAT0": "0000:11:00.1", "QAT1": "0000:10:00.1", "OTHER": "kept"}


def test_each_container_gets_its_own_env_map() -> None:
    devices = {
        address: DeviceInfo(envs={f"QAT{number}": address})
        for number, address in enumerate(["0000:10:00.1", "0000:10:00.2", "0000:11:00.1"], start=1)
    }
    first = renumber(
        default_allocation(devices, ["0000:10:00.1", "0000:10:00.2"]), ["0000:10:00.1", "0000:10:00.2"]
    )
    second = renumber(default_allocation(devices, ["0000:11:00.1"]), ["0000:11:00.1"])
    assert dict(first.envs) == {"QAT0": "0000:10:00.1", "QAT1": "0000:10:00.2"}
    assert dict(second.envs) == {"QAT0": "0000:11:00.1"}
