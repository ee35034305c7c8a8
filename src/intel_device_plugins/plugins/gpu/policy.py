"""GPU preferred-allocation policies: which of the offered IDs a container should get.

Pure functions. An ID's card is the text before its first ``-`` (``card1-3`` → ``card1``), so a
policy can spread containers over cards (``none``, ``balanced``) or fill cards up (``packed``).
IDs the kubelet insists on (must-include) are always chosen first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum


class AllocationPolicy(StrEnum):
    NONE = "none"
    BALANCED = "balanced"
    PACKED = "packed"


def card_of(device_id: str) -> str:
    return device_id.split("-", 1)[0]


def _start(available: Sequence[str], must_include: Sequence[str]) -> list[str]:
    offered = set(available)
    chosen: list[str] = []
    for device_id in must_include:
        if device_id in offered and device_id not in chosen:
            chosen.append(device_id)
    return chosen


def none_policy(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """In the kubelet's order, one ID per card first; then fill up with the rest in order."""
    chosen = _start(available, must_include)
    cards = {card_of(device_id) for device_id in chosen}
    for device_id in available:
        if len(chosen) >= size:
            return chosen
        if device_id not in chosen and card_of(device_id) not in cards:
            chosen.append(device_id)
            cards.add(card_of(device_id))
    for device_id in available:
        if len(chosen) >= size:
            break
        if device_id not in chosen:
            chosen.append(device_id)
    return chosen


def balanced_policy(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """Take from the card with the most IDs left (ties: the lexically first card), sorted within cards."""
    chosen = _start(available, must_include)
    per_card: dict[str, list[str]] = {}
    for device_id in sorted(set(available) - set(chosen)):
        per_card.setdefault(card_of(device_id), []).append(device_id)
    while len(chosen) < size and per_card:
        card = min(per_card, key=lambda name: (-len(per_card[name]), name))
        chosen.append(per_card[card].pop(0))
        if not per_card[card]:
            del per_card[card]
    return chosen


def packed_policy(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """The lexically first IDs, so containers share as few cards as possible."""
    chosen = _start(available, must_include)
    for device_id in sorted(set(available)):
        if len(chosen) >= size:
            break
        if device_id not in chosen:
            chosen.append(device_id)
    return chosen


POLICIES: dict[AllocationPolicy, Callable[[Sequence[str], Sequence[str], int], list[str]]] = {
    AllocationPolicy.NONE: none_policy,
    AllocationPolicy.BALANCED: balanced_policy,
    AllocationPolicy.PACKED: packed_policy,
}
