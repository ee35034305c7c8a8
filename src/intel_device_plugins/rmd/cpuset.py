"""CPU lists in the kernel's cpuset notation ("0-3,6,8"), as RMD and the RmdWorkload spec use them.

RMD also accepts ``^N`` exclusions inside a list ("0-7,^3"); they remove CPUs from what the list selected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

# One element: a CPU, a range, optionally negated. The CRD schema uses the same expression, and the same
# check that ranges ascend (a rule the API server evaluates; ``parse`` refuses such a range too).
CPUSET_PATTERN: Final = r"^\^?[0-9]+(-[0-9]+)?(,\^?[0-9]+(-[0-9]+)?)*$"
ASCENDING_RANGES_CEL: Final = (
    "self.split(',').all(e, !e.contains('-') || "
    "int(e.replace('^', '').split('-')[0]) <= int(e.split('-')[1]))"
)
ASCENDING_MESSAGE: Final = "a CPU range must not end before it starts"
MAX_CPU: Final = 1 << 16  # bounds what a request can make us allocate
_ELEMENT = re.compile(r"^(\^?)([0-9]+)(?:-([0-9]+))?$")


class CpusetError(ValueError):
    """A CPU list that cannot be parsed; the message quotes it."""


def parse(text: str) -> frozenset[int]:
    """The CPUs of one list such as ``"0-3,6,^2"``; raises CpusetError with the offending element."""
    text = text.strip()
    if not text:
        return frozenset()
    selected: set[int] = set()
    excluded: set[int] = set()
    for element in text.split(","):
        match = _ELEMENT.match(element.strip())
        if match is None:
            raise CpusetError(f'invalid CPU list "{text}": element "{element}" is not N, N-M or ^N')
        first = int(match.group(2))
        last = int(match.group(3)) if match.group(3) is not None else first
        if last < first:
            raise CpusetError(f'invalid CPU list "{text}": range "{element}" ends before it starts')
        if last >= MAX_CPU:
            raise CpusetError(f'invalid CPU list "{text}": CPU {last} is beyond {MAX_CPU - 1}')
        (excluded if match.group(1) else selected).update(range(first, last + 1))
    return frozenset(selected - excluded)


def parse_all(lists: Iterable[str]) -> frozenset[int]:
    """Union of several lists (the spec's ``coreIds`` is a list of lists)."""
    out: set[int] = set()
    for text in lists:
        out |= parse(text)
    return frozenset(out)


def format_cpus(cpus: Iterable[int]) -> str:
    """Canonical text: sorted, consecutive CPUs folded into ranges ("0-19,21-39")."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
