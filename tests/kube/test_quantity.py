"""Quantities by value, in thousandths, rounded up as Kubernetes rounds them."""

from __future__ import annotations

import pytest

from intel_device_plugins.kube.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "thousandths"),
    [
        ("1", 1000),
        ("1000", 1_000_000),
        ("1k", 1_000_000),
        ("1e3", 1_000_000),
        ("1E3", 1_000_000),
        ("500m", 500),
        ("0.5", 500),
        (".5", 500),
        ("5.", 5000),
        ("+5", 5000),
        ("1Ki", 1_024_000),
        ("16Gi", 16 * 2**30 * 1000),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("-1Mi", -(2**20) * 1000),
        ("0.0001", 1),  # rounded up to a thousandth
        ("-0.0001", -1),  # away from zero
        ("1e-5", 1),
        ("0.1m", 1),
        ("2E", 2 * 10**18 * 1000),
    ],
)
def test_quantities_by_value(text: str, thousandths: int) -> None:
    assert parse_quantity(text) == thousandths


def test_equal_values_in_other_forms_are_equal() -> None:
    assert (
        parse_quantity("1000") == parse_quantity("1k") == parse_quantity("1e3") == parse_quantity("1000000m")
    )
    assert parse_quantity("1024") == parse_quantity("1Ki")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "not a quantity"),
        ("k", "not a quantity"),
        (".", "not a quantity"),
        ("1 k", "not a quantity"),
        ("1KiB", "not a quantity"),
        ("1e9999", "not a quantity"),
        ("1x", "unknown suffix"),
        ("1Zi", "unknown suffix"),
        ("1" * 65, "longer than"),
    ],
)
def test_what_is_not_a_quantity_is_refused(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_quantity(text)
