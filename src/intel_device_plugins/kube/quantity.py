"""Kubernetes quantities (``1Gi``, ``500m``, ``1k``, ``1e3``) as exact integers of thousandths.

The API server writes a quantity back in its own canonical form (``1000`` becomes ``1k``), so two
quantities are compared by value. Kubernetes keeps a quantity to thousandths, rounding up (away
from zero); so does this parser, in plain integers (the ``decimal`` module is not needed for that).
"""

from __future__ import annotations

import re
from typing import Final

MAX_QUANTITY_CHARS: Final = 64
_DECIMAL_EXPONENTS: Final = {"m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_POWERS: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_QUANTITY: Final = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d{1,3})|([a-zA-Z]{0,2}))$")


def parse_quantity(text: str) -> int:
    """The quantity's value in thousandths; ``ValueError`` names what is wrong with ``text``."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"quantity longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY.match(text)
    if not match or not (match.group(2) or match.group(3)):
        raise ValueError(f"{text!r} is not a quantity")
    sign, whole, fraction, exponent, suffix = match.groups()
    fraction = fraction or ""
    numerator, denominator = int(whole + fraction or "0") * 1000, 10 ** len(fraction)
    if exponent is not None:
        power = int(exponent)
    elif suffix in _DECIMAL_EXPONENTS:
        power = _DECIMAL_EXPONENTS[suffix]
    elif suffix in _BINARY_POWERS:
        power = 0
        numerator *= 1024 ** _BINARY_POWERS[suffix]
    else:
        raise ValueError(f"{text!r} has an unknown suffix {suffix!r}")
    if power >= 0:
        numerator *= 10**power
    else:
        denominator *= 10**-power
    value: int = -(-numerator // denominator)  # rounded up, as Kubernetes rounds
    return -value if sign == "-" else value
