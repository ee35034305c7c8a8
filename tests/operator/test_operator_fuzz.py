"""Arbitrary JSON never crashes parsing, validation, admission or planning: it is answered or reported."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.operator.admission import handle_review
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.operator.model import SpecError, parse_spec
from intel_device_plugins.operator.reconcile import plan
from intel_device_plugins.operator.validation import validate_object

FIELDS = [
    "image",
    "initImage",
    "logLevel",
    "nodeSelector",
    "tolerations",
    "sharedDevNum",
    "allowIDs",
    "denyIDs",
    "preferredAllocationPolicy",
    "kernelVfDrivers",
    "provisioningConfig",
    "driver",
    "mode",
    "enableMonitoring",
    "maxNumDevices",
    "enclaveLimit",
    "dpdkDriver",
    "bypathMode",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
specs = st.one_of(json_values, st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6))
kinds = st.sampled_from(ALL_KINDS)


@settings(max_examples=300, deadline=None)
@given(kinds, specs)
def test_parse_and_validate_never_crash(kind: DeviceKind, spec: Any) -> None:
    try:
        parse_spec(kind, spec)
    except SpecError as exc:
        assert exc.errors and all(e.path.startswith("spec") for e in exc.errors)
    verdict = validate_object(kind, {"spec": spec})
    assert verdict.allowed or verdict.message.startswith("invalid resource: spec")


@settings(max_examples=200, deadline=None)
@given(kinds, specs, st.sampled_from(["mutate", "validate"]), st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
def test_admission_always_answers(kind: DeviceKind, spec: Any, op: Any, operation: str) -> None:
    body = {
        "request": {
            "uid": "u",
            "operation": operation,
            "object": {"spec": spec},
            "kind": {"group": "deviceplugin.intel.com", "kind": kind.kind},
        }
    }
    resp = handle_review(kind, op, body)
    assert resp["response"]["uid"] == "u" and isinstance(resp["response"]["allowed"], bool)


@settings(max_examples=200, deadline=None)
@given(kinds, specs, json_values)
def test_plan_never_crashes(kind: DeviceKind, spec: Any, metadata: Any) -> None:
    p = plan(kind, {"metadata": metadata, "spec": spec}, {}, "ns")
    assert (p.daemonset is None) == bool(p.errors)
