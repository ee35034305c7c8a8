"""Check a JSON value against the OpenAPI schema fragment that also renders the CRD.

The operator's and the RMD operator's models declare each field's schema once; this checker turns the
same fragment into field errors, so a webhook message and the API server's own validation agree.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

JSONSchema = dict[str, Any]

# A checker for a string whose ``pattern`` a regular expression cannot fully express (an RMD cpuset):
# returns the error message, or None when the value is valid.
PatternCheck = Callable[[str], str | None]


@dataclasses.dataclass(frozen=True)
class FieldError:
    """A problem with one field; ``path`` is the JSON path such as ``spec.sharedDevNum``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError):
    """Raised when a spec cannot be turned into its typed model; carries every field error found."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = tuple(errors)


def check_value(
    path: str,
    value: Any,
    schema: JSONSchema,
    errors: list[FieldError],
    pattern_checks: Mapping[str, PatternCheck] | None = None,
) -> Any:
    """Coerce ``value`` per its schema or record errors naming ``path``; returns the parsed value.

    Arrays become tuples and objects with ``additionalProperties`` or preserved unknown fields become
    read-only mappings. ``pattern_checks`` replaces the regular-expression test of the patterns it names.
    """
    typ = schema.get("type")
    if typ == "string":
        if not isinstance(value, str):
            errors.append(FieldError(path, "must be a string"))
            return None
        if "enum" in schema and value not in schema["enum"]:
            allowed = ", ".join(f'"{v}"' for v in schema["enum"])
            errors.append(FieldError(path, f'unsupported value "{value}": supported values: {allowed}'))
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append(
                FieldError(path, f"length must be {schema.get('minLength', 0)}-{schema['maxLength']}")
            )
        if "pattern" in schema:
            special = (pattern_checks or {}).get(schema["pattern"])
            if special is not None:
                message = special(value)
                if message is not None:
                    errors.append(FieldError(path, message))
            elif re.fullmatch(schema["pattern"].strip("^$"), value) is None:
                errors.append(FieldError(path, f'"{value}" does not match {schema["pattern"]}'))
        return value
    if typ == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(FieldError(path, "must be an integer"))
            return None
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(FieldError(path, f"should be greater than or equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(FieldError(path, f"should be less than or equal to {schema['maximum']}"))
        return value
    if typ == "boolean":
        if not isinstance(value, bool):
            errors.append(FieldError(path, "must be a boolean"))
            return None
        return value
    if typ == "array":
        if not isinstance(value, list):
            errors.append(FieldError(path, "must be a list"))
            return None
        if len(value) > schema.get("maxItems", len(value)):
            errors.append(FieldError(path, f"must have at most {schema['maxItems']} items"))
        items = schema["items"]
        checks = pattern_checks
        return tuple(check_value(f"{path}[{i}]", v, items, errors, checks) for i, v in enumerate(value))
    if typ == "object":
        if not isinstance(value, Mapping):
            errors.append(FieldError(path, "must be an object"))
            return None
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return MappingProxyType(dict(value))
        if "additionalProperties" not in schema:
            # The caller checks the members itself (the operator's nodeSelector).
            return value
        for k, v in value.items():
            check_value(f"{path}.{k}", v, schema["additionalProperties"], errors, pattern_checks)
        return MappingProxyType({str(k): str(v) for k, v in value.items()})
    raise AssertionError(f"unhandled schema type {typ!r}")
