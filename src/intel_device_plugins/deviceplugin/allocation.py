"""Pure allocation helpers shared by the framework and the plugins' policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PreferredChoice:
    """A checked answer to one GetPreferredAllocation container request.

    ``problem`` is empty when the policy's answer was used as is, otherwise it says why the
    fallback was taken (for the log).
    """

    ids: tuple[str, ...]
    problem: str = ""


def fallback_choice(available: Sequence[str], must_include: Sequence[str], size: int) -> tuple[str, ...]:
    """Must-include IDs first, then available IDs in the kubelet's order, up to ``size``.

    Always acceptable to the kubelet: a subset of what it offered, containing what it insisted on.
    """
    offered = set(available)
    chosen: list[str] = []
    for device_id in [*must_include, *available]:
        if len(chosen) >= max(size, 0):
            break
        if device_id in offered and device_id not in chosen:
            chosen.append(device_id)
    return tuple(chosen)


def check_preferred(
    answer: Sequence[str], available: Sequence[str], must_include: Sequence[str], size: int
) -> PreferredChoice:
    """Accept a policy's answer only if the kubelet can use it; otherwise return the fallback.

    The kubelet rejects pods when GetPreferredAllocation fails, so a wrong answer must never reach
    it: duplicates, IDs it did not offer, a missing must-include ID or a wrong count all lead to the
    fallback, together with the reason.
    """
    wanted = min(max(size, 0), len(set(available)))
    offered = set(available)
    required = set(must_include) & offered
    problem = ""
    if len(set(answer)) != len(answer):
        problem = "answer contains duplicate IDs"
    elif not offered.issuperset(answer):
        problem = f"answer contains IDs that were not offered: {sorted(set(answer) - offered)}"
    elif not set(answer).issuperset(required):
        problem = f"answer misses must-include IDs: {sorted(required - set(answer))}"
    elif len(answer) != wanted:
        problem = f"answer has {len(answer)} IDs, {wanted} were requested"
    if problem:
        return PreferredChoice(fallback_choice(available, must_include, size), problem)
    return PreferredChoice(tuple(answer))
