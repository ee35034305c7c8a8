"""Kubernetes quantities (``1Gi``, ``500m``, ``1k``, ``1e3``) as exact decimals.

The API server writes a quantity back in its own canonical form (``1000`` becomes ``1k``), so two
quantities are compared by value. The value is rounded up to thousandths, as Kubernetes keeps them.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Final

MAX_QUANTITY_CHARS: Final = 64
_MULTIPLIERS: Final = {
    "m": Decimal(10) ** -3,
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(1024),
    "Mi": Decimal(1024) ** 2,
    "Gi": Decimal(1024) ** 3,
    "Ti": Decimal(1024) ** 4,
    "Pi": Decimal(1024) ** 5,
    "Ei": Decimal(1024) ** 6,
}
_QUANTITY: Final = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d{1,3})|([a-zA-Z]{0,2}))$")
_THOUSANDTH: Final = Decimal("0.001")
_CONTEXT: Final = Context(prec=60)
"""Room for the largest quantity the API allows (about 2^63 in thousandths) and then some."""


def parse_quantity(text: str) -> Decimal:
    """The quantity's value; ``ValueError`` names what is wrong with ``text``."""
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"quantity longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a quantity")
    number, exponent, suffix = match.groups()
    with localcontext(_CONTEXT):
        try:
            if exponent:
                value = Decimal(number) * Decimal(10) ** int(exponent[1:])
            elif suffix in _MULTIPLIERS:
                value = Decimal(number) * _MULTIPLIERS[suffix]
            else:
                raise ValueError(f"{text!r} has an unknown suffix {suffix!r}")
            return +value.quantize(_THOUSANDTH, rounding=ROUND_UP)
        except InvalidOperation as exc:
            raise ValueError(f"{text!r} is out of range") from exc
