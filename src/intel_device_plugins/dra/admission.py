"""The admission side of claim parameters: a ValidatingAdmissionPolicy made from a driver's declared kinds.

The API server then refuses a ResourceClaim or ResourceClaimTemplate whose opaque configuration for the
driver the driver would refuse at prepare (:mod:`intel_device_plugins.dra.parameters`): an unknown
``apiVersion``/``kind``, an unknown field, a value of the wrong type or out of range, or any opaque
entry for a driver that declares no kinds. The user learns it when creating the claim, not when a pod
fails to start. Only creation is checked: claims' and templates' specs are immutable, and an update
(a finalizer removed) of a claim made before the policy must not be blocked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from intel_device_plugins.dra.parameters import ParameterField, ParameterKind

PARAMETERS_PATH = "spec.devices.config[].opaque.parameters"
"""How messages name the field (a template's is under ``spec.spec``)."""


def _quote(text: str) -> str:
    """A CEL string literal; the declarations hold no quotes or backslashes, and this makes sure."""
    if "'" in text or "\\" in text:
        raise ValueError(f"{text!r} cannot go into CEL as is")
    return f"'{text}'"


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


def _is_kind(kind: ParameterKind) -> str:
    """CEL: parameters ``p`` (a map) are of ``kind``."""
    version = f"p.?apiVersion.orValue('') == {_quote(kind.api_version)}"
    named = f"({version} && p.?kind.orValue('') == {_quote(kind.kind)})"
    if kind.accepts_bare:
        return f"({named} || (!('apiVersion' in p) && !('kind' in p)))"
    return named


def _field_valid(name: str, spec: ParameterField) -> str:
    """CEL: field ``name`` of ``p`` is absent or valid."""
    value = f"p[{_quote(name)}]"
    checks = [f"type({value}) == string"]
    if spec.choices:
        checks.append(f"{value} in {_list(spec.choices)}")
    if spec.pattern:
        checks.append(f"{value}.matches({_quote('^(?:' + spec.pattern + ')$')})")
    return f"!({_quote(name)} in p) || ({' && '.join(checks)})"


def _field_rule(name: str, spec: ParameterField) -> str:
    if spec.choices:
        return f"a string, one of {', '.join(spec.choices)}"
    return f"a string, {spec.describe}" if spec.describe else "a string"


def _validations(driver: str, kinds: Sequence[ParameterKind]) -> list[dict[str, Any]]:
    if not kinds:
        return [
            {
                "expression": "size(variables.parameters) == 0",
                "message": f"spec.devices.config[].opaque: driver {driver} accepts no opaque parameters",
                "reason": "Invalid",
            }
        ]
    known = " || ".join(_is_kind(k) for k in kinds)
    names = ", ".join(f"{k.api_version} {k.kind}" for k in kinds)
    rules: list[dict[str, Any]] = [
        {
            "expression": "variables.parameters.all(p, type(p) == map)",
            "message": f"{PARAMETERS_PATH}: the parameters for driver {driver} must be an object",
            "reason": "Invalid",
        },
        {
            "expression": f"variables.parameters.all(p, type(p) != map || {known})",
            "messageExpression": (
                f"'{PARAMETERS_PATH}: apiVersion ' + "
                f"variables.parameters.filter(p, type(p) == map && !({known}))"
                ".map(p, string(p.?apiVersion.orValue('')) + ' kind ' + string(p.?kind.orValue('')))[0] + "
                f"' is not known to driver {driver} (known: {names})'"
            ),
            "message": f"{PARAMETERS_PATH}: apiVersion/kind not known to driver {driver} (known: {names})",
            "reason": "Invalid",
        },
    ]
    for kind in kinds:
        fields = kind.fields()
        allowed = _list(["apiVersion", "kind", *fields])
        ours = f"variables.parameters.filter(p, type(p) == map && {_is_kind(kind)})"
        rules.append(
            {
                "expression": f"{ours}.all(p, p.all(f, f in {allowed}))",
                "messageExpression": (
                    f"'{PARAMETERS_PATH}.' + {ours}.map(p, p.filter(f, !(f in {allowed})))"
                    f".filter(l, size(l) > 0)[0][0] + ': unknown field of {kind.kind}'"
                ),
                "message": f"{PARAMETERS_PATH}: unknown field of {kind.kind}",
                "reason": "Invalid",
            }
        )
        for name, (_, spec) in fields.items():
            rules.append(
                {
                    "expression": f"{ours}.all(p, {_field_valid(name, spec)})",
                    "message": f"{PARAMETERS_PATH}.{name}: must be {_field_rule(name, spec)}",
                    "reason": "Invalid",
                }
            )
    return rules


def policy_name(driver: str) -> str:
    return f"{driver}-claim-parameters"


def claim_parameters_policy(driver: str, kinds: Sequence[ParameterKind]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding (Deny) for ``driver``'s opaque claim parameters."""
    configs = (
        "request.resource.resource == 'resourceclaimtemplates' ? "
        "object.spec.?spec.?devices.?config.orValue([]) : object.spec.?devices.?config.orValue([])"
    )
    parameters = (
        f"variables.configs.filter(c, c.?opaque.?driver.orValue('') == {_quote(driver)})"
        ".map(c, c.opaque.?parameters.orValue({}))"
    )
    name = policy_name(driver)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["resourceclaims", "resourceclaimtemplates"],
                    }
                ]
            },
            "variables": [
                {"name": "configs", "expression": configs},
                {"name": "parameters", "expression": parameters},
            ],
            "validations": _validations(driver, kinds),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
