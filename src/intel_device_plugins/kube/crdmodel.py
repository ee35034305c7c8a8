"""The one language of this project's custom resources: typed models that are also their CRD schemas.

Every spec is a frozen dataclass whose fields carry their JSON name, OpenAPI schema and description in
``metadata`` (declared with ``field``); nested objects are models too. Cross-field rules are declared once as
``Rule`` objects holding both a CEL expression (rendered into the CRD as ``x-kubernetes-validations``, so the
API server rejects bad objects without a webhook) and the same check in Python. ``schema_of`` renders a
model's schema, ``parse`` builds a model from JSON naming every bad field, ``to_json`` goes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeVar

from intel_device_plugins.schemacheck import FieldError, JSONSchema, PatternCheck, SpecError, check_value

EMPTY: Final[Mapping[str, str]] = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class Rule:
    """A cross-field rule: ``cel`` for the API server, ``holds`` for Python; both must agree."""

    cel: str
    message: str
    holds: Callable[[Any], bool]


def field(
    json_name: str,
    description: str,
    schema: JSONSchema | None = None,
    *,
    default: Any = None,
    model: type[Model] | None = None,
) -> Any:
    """Declare a field: a JSON schema, or a nested ``model`` class (then the default is None)."""
    meta: dict[str, Any] = {"json": json_name, "schema": schema, "description": description}
    if model is not None:
        meta["model"] = model
    if isinstance(default, Mapping):
        return dataclasses.field(default_factory=lambda: EMPTY, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class Model:
    """Base of the model classes: ``RULES`` are checked after every field parsed."""

    RULES: ClassVar[tuple[Rule, ...]] = ()
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # JSON names that must be present


M = TypeVar("M", bound=Model)


def model_fields(cls: type[Model]) -> tuple[dataclasses.Field[Any], ...]:
    """Fields in JSON-name order (the schema's and the error messages' order)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return tuple(sorted(fields, key=lambda f: str(f.metadata["json"])))


def schema_of(cls: type[Model], description: str | None = None) -> JSONSchema:
    """Structural OpenAPI v3 schema of a model class, with its rules as ``x-kubernetes-validations``."""
    props: dict[str, JSONSchema] = {}
    for f in model_fields(cls):
        model = f.metadata.get("model")
        desc = str(f.metadata["description"])
        sub = schema_of(model, desc) if model is not None else {**f.metadata["schema"], "description": desc}
        props[str(f.metadata["json"])] = sub
    out: JSONSchema = {
        "type": "object",
        "description": description or (cls.__doc__ or "").strip().splitlines()[0],
        "properties": props,
    }
    if cls.REQUIRED:
        out["required"] = list(cls.REQUIRED)
    if cls.RULES:
        out["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in cls.RULES]
    return out


def _parse_into(
    cls: type[M], raw: Any, path: str, errors: list[FieldError], checks: Mapping[str, PatternCheck]
) -> M | None:
    if not isinstance(raw, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return None
    before = len(errors)
    kwargs: dict[str, Any] = {}
    for name in cls.REQUIRED:
        if raw.get(name) is None:
            errors.append(FieldError(f"{path}.{name}", "Required value"))
    for f in model_fields(cls):
        json_name = str(f.metadata["json"])
        if raw.get(json_name) is None:
            continue
        sub_path = f"{path}.{json_name}"
        model = f.metadata.get("model")
        if model is not None:
            parsed = _parse_into(model, raw[json_name], sub_path, errors, checks)
        else:
            parsed = check_value(sub_path, raw[json_name], f.metadata["schema"], errors, checks)
        if parsed is not None:
            kwargs[f.name] = parsed
    if len(errors) > before:
        return None
    obj = cls(**kwargs)
    for rule in cls.RULES:
        if not rule.holds(obj):
            errors.append(FieldError(path, rule.message))
    return obj if len(errors) == before else None


def parse(
    cls: type[M], raw: Any, path: str = "spec", pattern_checks: Mapping[str, PatternCheck] | None = None
) -> M:
    """Build the typed model from JSON; unknown fields are ignored (the API server prunes them).

    ``pattern_checks`` check the strings whose ``pattern`` a regular expression cannot fully express.
    Raises SpecError naming every malformed field and broken rule.
    """
    errors: list[FieldError] = []
    obj = _parse_into(cls, {} if raw is None else raw, path, errors, pattern_checks or {})
    if errors or obj is None:
        raise SpecError(errors or [FieldError(path, "invalid")])
    return obj


def to_json(obj: Model) -> dict[str, Any]:
    """JSON form with absent, empty and false fields omitted."""
    out: dict[str, Any] = {}
    for f in model_fields(type(obj)):
        value = getattr(obj, f.name)
        if value is None or value is False or value == () or (isinstance(value, Mapping) and not value):
            continue
        name = str(f.metadata["json"])
        if isinstance(value, Model):
            out[name] = to_json(value)
        elif isinstance(value, Mapping):
            out[name] = dict(value)
        elif isinstance(value, tuple):
            out[name] = list(value)
        else:
            out[name] = value
    return out
