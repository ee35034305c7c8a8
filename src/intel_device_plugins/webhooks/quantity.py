"""Kubernetes resource quantities, parsed exactly (``Fraction``) and printed in BinarySI form."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# The API server stores at most 64-bit mantissas; 40 characters covers every quantity it accepts and keeps
# hostile input from turning into huge integers.
_MAX_LEN: Final = 40
_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?"
)


def parse_quantity(text: object) -> Fraction:
    """The exact value of a quantity such as ``2``, ``500m``, ``1Mi`` or ``1e3``; ValueError otherwise."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError(f"quantity must be a string, not {type(text).__name__}")
    raw = str(text)
    if len(raw) > _MAX_LEN:
        raise ValueError(f"quantity {raw[:_MAX_LEN]}... is longer than {_MAX_LEN} characters")
    match = _QUANTITY.fullmatch(raw)
    if match is None:
        raise ValueError(f"quantity {raw!r} is not a Kubernetes quantity")
    value = Fraction(match["num"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    return -value if match["sign"] == "-" else value


def binary_si(size: int) -> str:
    """``size`` with the largest binary suffix keeping it whole (``3Mi``, ``1536``), as the API prints it."""
    for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        unit = 1024**power
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
