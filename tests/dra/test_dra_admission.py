"""The claim parameter policy's CEL comes from the declarations (the real API server runs it in
tests/k8s/test_k8s_dra_claim_parameters.py); here what can be checked without one."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from intel_device_plugins.dra.admission import claim_parameters_policy
from intel_device_plugins.dra.parameters import ParameterKind, parameter
from intel_device_plugins.plugins.fpga.dra import FPGA_PARAMETER_KINDS
from intel_device_plugins.plugins.gpu.draparams import GPU_PARAMETER_KINDS


def validations(driver: str, kinds: tuple[ParameterKind, ...]) -> list[dict[str, str]]:
    policy, binding = claim_parameters_policy(driver, kinds)
    assert binding["spec"] == {"policyName": f"{driver}-claim-parameters", "validationActions": ["Deny"]}
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    rules: list[dict[str, str]] = policy["spec"]["validations"]
    return rules


def test_a_driver_declaring_no_kinds_refuses_every_opaque_entry_for_it() -> None:
    (rule,) = validations("qat.intel.com", ())
    assert rule["expression"] == "size(variables.parameters) == 0"
    assert "driver qat.intel.com accepts no opaque parameters" in rule["message"]


@pytest.mark.parametrize(
    ("driver", "kinds"), [("gpu.intel.com", GPU_PARAMETER_KINDS), ("fpga.intel.com", FPGA_PARAMETER_KINDS)]
)
def test_every_declared_field_has_its_own_rule_naming_it(
    driver: str, kinds: tuple[ParameterKind, ...]
) -> None:
    messages = [rule["message"] for rule in validations(driver, kinds)]
    for kind in kinds:
        assert f"spec.devices.config[].opaque.parameters: unknown field of {kind.kind}" in messages
        for name in kind.fields():
            assert any(
                m.startswith(f"spec.devices.config[].opaque.parameters.{name}: must be") for m in messages
            )


def test_a_declaration_that_cannot_be_written_as_a_cel_literal_is_refused() -> None:
    @dataclass(frozen=True)
    class Quoted:
        mode: str | None = parameter("mode", choices=("it's",))

    with pytest.raises(ValueError, match="cannot go into CEL"):
        claim_parameters_policy("x.example.com", (ParameterKind("x.example.com/v1alpha1", "Quoted", Quoted),))
