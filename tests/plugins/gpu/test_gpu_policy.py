"""Preferred-allocation policies: worked examples and properties over random offers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.allocation import check_preferred
from intel_device_plugins.plugins.gpu.discovery import GpuOptions
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.plugins.gpu.policy import (
    POLICIES,
    AllocationPolicy,
    balanced_policy,
    card_of,
    none_policy,
    packed_policy,
)

Policy = Callable[[Sequence[str], Sequence[str], int], list[str]]

ALL_POLICIES = [pytest.param(POLICIES[name], id=str(name)) for name in AllocationPolicy]


def ids(*cards: tuple[int, int]) -> list[str]:
    """``ids((0, 2), (1, 3))`` → card0-0, card0-1, card1-0, card1-1, card1-2."""
    return [f"card{card}-{n}" for card, count in cards for n in range(count)]


def test_card_of_an_id_is_the_text_before_the_first_dash() -> None:
    assert card_of("card1-3") == "card1"
    assert card_of("card12-0") == "card12"
    assert card_of("all") == "all"
    assert card_of("card1-x-2") == "card1"


def test_every_policy_name_has_a_policy() -> None:
    assert set(POLICIES) == set(AllocationPolicy)
    assert [str(name) for name in AllocationPolicy] == ["none", "balanced", "packed"]


# ----- none -----------------------------------------------------------------------------------


def test_none_takes_one_id_per_card_first() -> None:
    assert none_policy(ids((0, 2), (1, 2)), [], 2) == ["card0-0", "card1-0"]


def test_none_follows_the_kubelets_order() -> None:
    available = ["card1-1", "card0-1", "card1-0", "card0-0"]

    assert none_policy(available, [], 2) == ["card1-1", "card0-1"]


def test_none_fills_up_with_the_rest_in_order_when_every_card_has_one() -> None:
    available = ["card0-0", "card0-1", "card1-0", "card1-1", "card2-0"]

    assert none_policy(available, [], 4) == ["card0-0", "card1-0", "card2-0", "card0-1"]


def test_none_counts_must_include_cards_as_used() -> None:
    available = ids((0, 2), (1, 2), (2, 2))

    assert none_policy(available, ["card0-1"], 3) == ["card0-1", "card1-0", "card2-0"]


# ----- balanced -------------------------------------------------------------------------------


def test_balanced_spreads_over_cards() -> None:
    assert balanced_policy(ids((0, 2), (1, 2)), [], 2) == ["card0-0", "card1-0"]


def test_balanced_takes_from_the_card_with_most_ids_left() -> None:
    available = ids((0, 1), (1, 3), (2, 2))

    # card1 (3 left) → card1 and card2 tie at 2, card1 is first → card2 (2 left) → all at 1.
    assert balanced_policy(available, [], 4) == ["card1-0", "card1-1", "card2-0", "card0-0"]


def test_balanced_sorts_within_a_card_and_ignores_the_offer_order() -> None:
    available = ["card1-2", "card0-1", "card1-0", "card0-0", "card1-1"]

    assert balanced_policy(available, [], 3) == ["card1-0", "card0-0", "card1-1"]


def test_balanced_ties_go_to_the_lexically_first_card() -> None:
    available = ids((2, 2), (10, 2), (1, 2))

    assert balanced_policy(available, [], 3) == ["card1-0", "card10-0", "card2-0"]


def test_balanced_keeps_must_include_and_balances_the_rest() -> None:
    available = ids((0, 3), (1, 3))

    assert balanced_policy(available, ["card0-2"], 3) == ["card0-2", "card1-0", "card0-0"]


# ----- packed ---------------------------------------------------------------------------------


def test_packed_fills_one_card_first() -> None:
    available = ["card1-0", "card0-1", "card1-1", "card0-0"]

    assert packed_policy(available, [], 3) == ["card0-0", "card0-1", "card1-0"]


def test_packed_order_is_lexical_as_upstream() -> None:
    available = ids((2, 1), (10, 1), (1, 1))

    assert packed_policy(available, [], 2) == ["card1-0", "card10-0"]


def test_packed_puts_must_include_first() -> None:
    assert packed_policy(ids((0, 2), (1, 2)), ["card1-1"], 2) == ["card1-1", "card0-0"]


# ----- every policy ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_asking_for_more_than_offered_returns_everything(policy: Policy) -> None:
    available = ids((0, 2), (1, 1))

    assert sorted(policy(available, [], 5)) == sorted(available)


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_size_zero_or_empty_offer_returns_nothing(policy: Policy) -> None:
    assert policy(ids((0, 2)), [], 0) == []
    assert policy([], [], 3) == []


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_must_include_ids_that_were_not_offered_are_ignored(policy: Policy) -> None:
    answer = policy(ids((0, 2)), ["card7-0", "card0-1"], 2)

    assert "card7-0" not in answer
    assert "card0-1" in answer
    assert len(answer) == 2


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_monitoring_resource_has_the_single_id_all(policy: Policy) -> None:
    assert policy(["all"], [], 1) == ["all"]
    assert policy(["all"], ["all"], 1) == ["all"]


@pytest.mark.parametrize("name", list(AllocationPolicy))
def test_plugin_uses_the_configured_policy(name: AllocationPolicy) -> None:
    plugin = GpuPlugin(prefix="/nonexistent", options=GpuOptions(), policy=name)
    available = ["card1-1", "card0-1", "card1-0", "card0-0"]

    answer = plugin.preferred_allocation("i915", available, [], 2)

    assert list(answer) == POLICIES[name](available, [], 2)


def test_the_policies_give_different_answers_for_one_offer() -> None:
    available = ["card1-1", "card0-1", "card1-0", "card0-0"]

    assert none_policy(available, [], 2) == ["card1-1", "card0-1"]
    assert balanced_policy(available, [], 2) == ["card0-0", "card1-0"]
    assert packed_policy(available, [], 2) == ["card0-0", "card0-1"]


# ----- properties -----------------------------------------------------------------------------


@st.composite
def offers(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    """A kubelet request: unique available IDs in any order, must-include ⊆ available, ≤ size."""
    cards = draw(st.lists(st.integers(0, 15), unique=True, max_size=6))
    available = [f"card{card}-{n}" for card in cards for n in range(draw(st.integers(1, 5)))]
    available = draw(st.permutations(available))
    size = draw(st.integers(0, len(available) + 3))
    must = draw(
        st.lists(st.sampled_from(available), unique=True, max_size=size) if available else st.just([])
    )
    return list(available), must, size


POLICY_NAMES = st.sampled_from(list(AllocationPolicy))

# No deadline: the machine may be busy, and these tests are about answers, not speed.
untimed = settings(deadline=None)


@untimed
@given(offer=offers(), name=POLICY_NAMES)
def test_answer_is_a_valid_choice(offer: tuple[list[str], list[str], int], name: AllocationPolicy) -> None:
    available, must, size = offer
    answer = POLICIES[name](tuple(available), tuple(must), size)

    assert set(answer) <= set(available)
    assert len(answer) == len(set(answer))
    assert len(answer) == min(size, len(available))
    assert set(must) <= set(answer)
    assert check_preferred(answer, available, must, size).problem == ""


@untimed
@given(offer=offers(), name=POLICY_NAMES)
def test_answer_starts_with_must_include_and_is_deterministic(
    offer: tuple[list[str], list[str], int], name: AllocationPolicy
) -> None:
    available, must, size = offer
    before = (list(available), list(must))
    answer = POLICIES[name](available, must, size)

    assert answer[: len(must)] == must
    assert POLICIES[name](available, must, size) == answer
    assert (available, must) == before


@untimed
@given(offer=offers(), stray=st.lists(st.sampled_from(["card99-0", "cardX-1", "all"]), unique=True))
def test_must_include_ids_not_offered_are_ignored(
    offer: tuple[list[str], list[str], int], stray: list[str]
) -> None:
    available, must, size = offer
    for policy in POLICIES.values():
        assert policy(available, [*stray, *must], size) == policy(available, must, size)


def free_per_card(available: Sequence[str], must: Sequence[str]) -> Counter[str]:
    return Counter(card_of(device_id) for device_id in available if device_id not in must)


@untimed
@given(offer=offers())
def test_balanced_never_doubles_up_while_a_fuller_card_is_untouched(
    offer: tuple[list[str], list[str], int],
) -> None:
    available, must, size = offer
    answer = balanced_policy(available, must, size)
    free = free_per_card(available, must)
    picked = Counter(card_of(device_id) for device_id in answer[len(must) :])

    for card, count in picked.items():
        if count < 2:
            continue
        for other in free:
            if picked[other] == 0:
                # At card's second pick it had free[card] - 1 left, and other had all of its IDs.
                assert free[other] <= free[card] - 1, (card, other, answer)


@untimed
@given(offer=offers())
def test_balanced_leaves_no_card_more_than_one_id_fuller(offer: tuple[list[str], list[str], int]) -> None:
    available, must, size = offer
    answer = balanced_policy(available, must, size)
    free = free_per_card(available, must)
    picked = Counter(card_of(device_id) for device_id in answer[len(must) :])

    for card in picked:
        left_at_last_pick = free[card] - picked[card] + 1
        for other in free:
            assert free[other] - picked[other] <= left_at_last_pick, (card, other, answer)


@untimed
@given(offer=offers())
def test_balanced_takes_the_lexically_first_ids_of_each_card(offer: tuple[list[str], list[str], int]) -> None:
    available, must, size = offer
    answer = balanced_policy(available, must, size)

    for card in {card_of(device_id) for device_id in answer[len(must) :]}:
        free = sorted(d for d in available if card_of(d) == card and d not in must)
        taken = [d for d in answer[len(must) :] if card_of(d) == card]
        assert taken == free[: len(taken)]


@untimed
@given(offer=offers())
def test_packed_returns_must_include_then_the_lexically_first_ids(
    offer: tuple[list[str], list[str], int],
) -> None:
    available, must, size = offer
    answer = packed_policy(available, must, size)

    rest = sorted(set(available) - set(must))
    assert answer == must + rest[: max(0, min(size, len(available)) - len(must))]


@untimed
@given(offer=offers())
def test_none_only_doubles_up_once_every_card_is_used(offer: tuple[list[str], list[str], int]) -> None:
    available, must, size = offer
    answer = none_policy(available, must, size)

    seen: set[str] = {card_of(device_id) for device_id in must}
    doubled = False
    for device_id in answer[len(must) :]:
        doubled = doubled or card_of(device_id) in seen
        seen.add(card_of(device_id))
    if doubled:
        assert seen == {card_of(device_id) for device_id in available}


@untimed
@given(offer=offers())
def test_none_takes_each_new_card_by_its_first_offered_id(offer: tuple[list[str], list[str], int]) -> None:
    available, must, size = offer
    assume(not must)
    answer = none_policy(available, must, size)

    first_of_card: dict[str, str] = {}
    for device_id in available:
        first_of_card.setdefault(card_of(device_id), device_id)
    spread = answer[: len(first_of_card)]
    assert spread == [d for d in available if first_of_card[card_of(d)] == d][: len(spread)]
