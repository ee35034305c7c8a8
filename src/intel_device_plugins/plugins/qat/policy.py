"""QAT preferred-allocation policies and per-container environment, as pure functions."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum

from intel_device_plugins.deviceplugin.model import ContainerAllocation


class Policy(StrEnum):
    NONE = "none"
    PACKED = "packed"
    BALANCED = "balanced"


def balanced_key(device_id: str) -> tuple[str, ...]:
    """``dddd:bb:dd.f`` → ``(dd.f, bb, dddd)``: VFs with the same slot on different PFs come first.

    Sorting by the reversed address interleaves the PFs (each PF has its own bus), so the first N
    of that order spread over as many PFs as possible.
    """
    return tuple(reversed(device_id.split(":")))


_ORDERS: Mapping[Policy, Callable[[list[str]], list[str]]] = {
    Policy.NONE: lambda ids: ids,
    Policy.PACKED: sorted,
    Policy.BALANCED: lambda ids: sorted(ids, key=lambda i: (balanced_key(i), i)),
}


def preferred_allocation(
    policy: Policy, available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    """``size`` IDs out of ``available``: the must-include ones first, then the policy's order.

    none keeps the kubelet's order, packed takes the lowest addresses (filling one PF before the
    next), balanced spreads over PFs. Never raises: an oversized request yields everything offered.
    """
    offered = list(dict.fromkeys(available))
    wanted = max(0, min(size, len(offered)))
    offered_set = set(offered)
    chosen = [device_id for device_id in dict.fromkeys(must_include) if device_id in offered_set][:wanted]
    taken = set(chosen)
    for device_id in _ORDERS[policy]([d for d in offered if d not in taken]):
        if len(chosen) >= wanted:
            break
        chosen.append(device_id)
    return chosen


_QAT_ENV = re.compile(r"^QAT\d+$")


def container_envs(envs: Mapping[str, str], ids: Sequence[str]) -> dict[str, str]:
    """A fresh env map for one container: ``QAT0``… numbered in request order, other keys kept.

    Each container gets its own map, so two containers in one request never see each other's
    devices (upstream shared one map across all container responses).
    """
    result = {key: value for key, value in envs.items() if not _QAT_ENV.match(key)}
    for number, device_id in enumerate(dict.fromkeys(ids)):
        result[f"QAT{number}"] = device_id
    return result


def renumber(allocation: ContainerAllocation, ids: Sequence[str]) -> ContainerAllocation:
    return ContainerAllocation(
        nodes=allocation.nodes,
        mounts=allocation.mounts,
        envs=container_envs(allocation.envs, ids),
        annotations=allocation.annotations,
        cdi_devices=allocation.cdi_devices,
    )
