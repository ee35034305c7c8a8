"""Typed opaque claim parameters: what a driver declares it understands, and a strict decoder for it.

A driver declares its parameter kinds (``apiVersion`` ``<driver>/v1alpha1`` and a ``kind``), each a
frozen dataclass whose fields carry a :class:`ParameterField` in their metadata. Decoding is pure and
strict: an unknown ``apiVersion``/``kind``, an unknown field, a value of the wrong type or outside its
allowed values is an error naming the JSON path, so a claim never runs with a setting the driver did not
honour. A driver that declares no kinds refuses every opaque entry addressed to it. The same
declarations produce the admission policy's CEL (:mod:`intel_device_plugins.dra.admission`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

API_VERSION_SUFFIX = "v1alpha1"


class ParameterError(ValueError):
    """Opaque parameters this driver does not accept; the message names the JSON path."""


@dataclass(frozen=True)
class ParameterField:
    """One string field of a parameter kind: its JSON name and what values it may take."""

    json_name: str
    choices: tuple[str, ...] = ()
    pattern: str = ""
    """A regular expression the whole value must match (RE2 syntax too: it goes into CEL as is)."""
    describe: str = ""
    """What a valid value looks like, for error messages (``8 to 40 hexadecimal digits``)."""

    def check(self, value: object, where: str) -> str:
        if not isinstance(value, str):
            raise ParameterError(f"{where}: must be a string, not {type(value).__name__}")
        if self.choices and value not in self.choices:
            raise ParameterError(f"{where}: {value!r} is not one of {', '.join(self.choices)}")
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise ParameterError(f"{where}: {value!r} is not {self.describe or 'valid'}")
        return value


def parameter(json_name: str, *, choices: Sequence[str] = (), pattern: str = "", describe: str = "") -> Any:
    """A dataclass field (default ``None``: not set) that decodes from ``json_name``."""
    spec = ParameterField(json_name, tuple(choices), pattern, describe)
    return dataclasses.field(default=None, metadata={"parameter": spec})


@dataclass(frozen=True)
class ParameterKind:
    """One versioned kind of parameters a driver understands, decoded into ``type``."""

    api_version: str
    kind: str
    type: type[Any]
    accepts_bare: bool = False
    """Parameters with neither ``apiVersion`` nor ``kind`` are of this kind (a deprecated legacy form)."""

    def fields(self) -> dict[str, tuple[str, ParameterField]]:
        """JSON name → (attribute name, field spec)."""
        out: dict[str, tuple[str, ParameterField]] = {}
        for item in dataclasses.fields(self.type):
            spec = item.metadata.get("parameter")
            if isinstance(spec, ParameterField):
                out[spec.json_name] = (item.name, spec)
        return out


@runtime_checkable
class DeclaresParameters(Protocol):
    """A driver profile with opaque parameter kinds; profiles without this attribute declare none."""

    @property
    def parameter_kinds(self) -> Sequence[ParameterKind]: ...


def parameter_kinds_of(profile: object) -> tuple[ParameterKind, ...]:
    return tuple(profile.parameter_kinds) if isinstance(profile, DeclaresParameters) else ()


def api_version(driver: str) -> str:
    """``gpu.intel.com`` → ``gpu.intel.com/v1alpha1``: each driver's one API group."""
    return f"{driver}/{API_VERSION_SUFFIX}"


def decode(
    kinds: Sequence[ParameterKind], driver: str, parameters: object, where: str
) -> tuple[ParameterKind, dict[str, str]]:
    """The kind and the fields set (attribute name → value) of one opaque entry's ``parameters``."""
    if not kinds:
        raise ParameterError(f"{where}: driver {driver} accepts no opaque parameters")
    if not isinstance(parameters, Mapping):
        raise ParameterError(f"{where}: is not an object")
    version, kind_name = parameters.get("apiVersion"), parameters.get("kind")
    if version is None and kind_name is None:
        kind = next((k for k in kinds if k.accepts_bare), None)
        if kind is None:
            raise ParameterError(f"{where}: apiVersion and kind are missing")
    else:
        kind = next((k for k in kinds if k.api_version == version and k.kind == kind_name), None)
        if kind is None:
            known = ", ".join(f"{k.api_version} {k.kind}" for k in kinds)
            raise ParameterError(
                f"{where}: apiVersion {version!r} kind {kind_name!r} is not known to driver {driver} "
                f"(known: {known})"
            )
    fields = kind.fields()
    values: dict[str, str] = {}
    for key, value in parameters.items():
        if key in ("apiVersion", "kind"):
            continue
        found = fields.get(str(key))
        if found is None:
            raise ParameterError(f"{where}.{key}: unknown field of {kind.kind}")
        attribute, spec = found
        values[attribute] = spec.check(value, f"{where}.{key}")
    return kind, values


def merged(
    kinds: Sequence[ParameterKind], decoded: Sequence[tuple[ParameterKind, dict[str, str]]]
) -> tuple[Any, ...]:
    """One instance per kind that any entry set, fields merged in order (later entries win per field)."""
    per_kind: dict[tuple[str, str], dict[str, str]] = {}
    for kind, values in decoded:
        per_kind.setdefault((kind.api_version, kind.kind), {}).update(values)
    return tuple(
        kind.type(**per_kind[(kind.api_version, kind.kind)])
        for kind in kinds
        if (kind.api_version, kind.kind) in per_kind
    )


T = TypeVar("T")


def parameters_of(config: Sequence[object], cls: type[T]) -> T | None:
    """The merged parameters of type ``cls`` among a device's ``config``, or ``None`` when none apply."""
    return next((item for item in config if isinstance(item, cls)), None)
