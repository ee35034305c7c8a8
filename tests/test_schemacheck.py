"""The shared schema checker: what the operator's and the RMD models rely on beyond their own tests."""

from __future__ import annotations

from types import MappingProxyType

from intel_device_plugins.schemacheck import FieldError, check_value


def test_pattern_check_replaces_the_regular_expression() -> None:
    schema = {"type": "string", "pattern": "^[0-9]+$"}
    errors: list[FieldError] = []
    check_value("spec.x", "12", schema, errors, {"^[0-9]+$": lambda v: f"custom {v}"})
    assert errors == [FieldError("spec.x", "custom 12")]
    errors = []
    check_value("spec.x", "ab", schema, errors)
    assert errors == [FieldError("spec.x", '"ab" does not match ^[0-9]+$')]


def test_pattern_check_reaches_array_items_and_map_values() -> None:
    item = {"type": "string", "pattern": "P"}
    errors: list[FieldError] = []
    checks = {"P": lambda v: None if v == "ok" else "bad"}
    check_value("a", ["ok", "no"], {"type": "array", "items": item}, errors, checks)
    check_value("m", {"k": "no"}, {"type": "object", "additionalProperties": item}, errors, checks)
    assert errors == [FieldError("a[1]", "bad"), FieldError("m.k", "bad")]


def test_object_without_member_schema_is_returned_unchanged() -> None:
    raw = {"a": 1}
    errors: list[FieldError] = []
    assert check_value("spec.nodeSelector", raw, {"type": "object"}, errors) is raw
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    typed = check_value("m", {"a": "b"}, string_map, errors)
    assert typed == MappingProxyType({"a": "b"}) and errors == []


def test_bounds_and_item_count() -> None:
    errors: list[FieldError] = []
    check_value("n", 5, {"type": "integer", "minimum": 0, "maximum": 4}, errors)
    check_value("l", [1, 2], {"type": "array", "maxItems": 1, "items": {"type": "integer"}}, errors)
    assert errors == [
        FieldError("n", "should be less than or equal to 4"),
        FieldError("l", "must have at most 1 items"),
    ]
