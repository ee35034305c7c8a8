"""Reading a claim's allocation: only this driver's results in this node's pool, errors name the field."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.dra.claims import ClaimError, allocated_devices, base_request
from intel_device_plugins.dra.model import AllocatedDevice, ClaimRef
from intel_device_plugins.dra.parameters import ParameterKind, api_version, parameter
from tests.dra.draclaims import DRIVER, NODE, claim, result

UID = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
REF = ClaimRef(namespace="ns", name="claim", uid=UID)


def test_results_of_this_driver_in_order_with_share_and_capacity() -> None:
    found = allocated_devices(
        claim(
            UID,
            result("card1", request="big/large", shareID="s-1", consumedCapacity={"memory": "4Gi"}),
            result("nic0", driver="net.example.com", pool="other"),
            result("card0", request="mon", adminAccess=True),
        ),
        REF,
        DRIVER,
        NODE,
    )
    assert found == (
        AllocatedDevice(
            request="big", pool=NODE, device="card1", share_id="s-1", consumed_capacity={"memory": "4Gi"}
        ),
        AllocatedDevice(request="mon", pool=NODE, device="card0", admin_access=True),
    )
    assert dict(found[0].consumed_capacity) == {"memory": "4Gi"}


def test_a_claim_with_no_result_of_this_driver_has_no_devices() -> None:
    assert allocated_devices(claim(UID, result("nic0", driver="net.example.com")), REF, DRIVER, NODE) == ()


def test_replaced_claim_names_both_uids() -> None:
    with pytest.raises(ClaimError, match=r"ns/claim: metadata.uid is 'other'.*asked for '0b6a.*replaced"):
        allocated_devices(claim("other", result("card0")), REF, DRIVER, NODE)


def test_unallocated_claim_is_refused() -> None:
    unallocated = claim(UID)
    del unallocated["status"]
    with pytest.raises(ClaimError, match=r"ResourceClaim ns/claim: status.allocation is missing"):
        allocated_devices(unallocated, REF, DRIVER, NODE)


def test_result_in_another_pool_names_index_and_pools() -> None:
    with pytest.raises(ClaimError, match=r"results\[1\].pool is 'node-b'.*serves pool 'node-a'"):
        allocated_devices(claim(UID, result("card0"), result("card1", pool="node-b")), REF, DRIVER, NODE)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("device", "../../etc", r"results\[0\].device '../../etc' is not a DNS label"),
        ("device", None, r"results\[0\].device is missing"),
        ("request", 3, r"results\[0\].request is missing or not a string"),
        ("shareID", 7, r"results\[0\].shareID is not a string"),
        ("adminAccess", "yes", r"results\[0\].adminAccess is not a boolean"),
        ("consumedCapacity", {"memory": [1]}, r"results\[0\].consumedCapacity.memory is not a quantity"),
    ],
)
def test_bad_fields_are_named(field: str, value: object, message: str) -> None:
    bad = claim(UID, result("card0"))
    bad["status"]["allocation"]["devices"]["results"][0][field] = value
    with pytest.raises(ClaimError, match=message):
        allocated_devices(bad, REF, DRIVER, NODE)


def test_unsafe_uid_from_the_kubelet_is_refused() -> None:
    with pytest.raises(ClaimError, match=r"claim UID '../x' is not a valid UID"):
        allocated_devices(claim("../x", result("card0")), ClaimRef("ns", "claim", "../x"), DRIVER, NODE)


def test_base_request_strips_the_subrequest() -> None:
    assert base_request("gpu/large") == "gpu"
    assert base_request("gpu") == "gpu"


_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)


@given(
    st.lists(
        st.tuples(_names, st.sampled_from([DRIVER, "net.example.com"]), st.sampled_from(["gpu", "b", "c/d"])),
        max_size=12,
    )
)
def test_exactly_this_drivers_results_survive_in_order(entries: list[tuple[str, str, str]]) -> None:
    document = claim(
        UID, *(result(name, request=request, driver=driver) for name, driver, request in entries)
    )
    pristine = copy.deepcopy(document)
    found = allocated_devices(document, REF, DRIVER, NODE)
    expected = [(name, request.split("/")[0]) for name, driver, request in entries if driver == DRIVER]
    assert [(device.device, device.request) for device in found] == expected
    assert document == pristine  # the claim is read, never changed


@dataclass(frozen=True)
class SampleConfig:
    mode: str | None = parameter("mode", choices=("a", "b", "c"))
    name: str | None = parameter("name", pattern="[a-z]+", describe="lower-case letters")


KINDS = (ParameterKind(api_version(DRIVER), "SampleConfig", SampleConfig),)


def sample(**fields: str) -> dict[str, str]:
    return {"apiVersion": api_version(DRIVER), "kind": "SampleConfig", **fields}


def test_opaque_configuration_reaches_the_requests_it_names_class_fields_first_claim_fields_win() -> None:
    allocated = claim(UID, result("card0", request="gpu"), result("card1", request="other/small"))
    allocated["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": sample(mode="b")},
        },
        {"source": "FromClaim", "opaque": {"driver": "net.example.com", "parameters": {"x": 1}}},
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": sample(mode="a", name="cls")}},
        {
            "source": "FromClaim",
            "requests": ["other/small"],
            "opaque": {"driver": DRIVER, "parameters": sample(name="claim")},
        },
    ]
    gpu, other = allocated_devices(allocated, REF, DRIVER, NODE, KINDS)
    assert gpu.config == (SampleConfig(mode="b", name="cls"),)
    assert other.config == (SampleConfig(mode="a", name="claim"),)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"apiVersion": api_version(DRIVER), "kind": "Other"},
            r"config\[0\].opaque.parameters: apiVersion 'gpu.example.com/v1alpha1' kind 'Other' is not known",
        ),
        (
            {"apiVersion": "v1", "kind": "SampleConfig"},
            r"config\[0\].opaque.parameters: apiVersion 'v1' kind 'SampleConfig' is not known",
        ),
        ({"mode": "a"}, r"config\[0\].opaque.parameters: apiVersion and kind are missing"),
        (sample(colour="red"), r"config\[0\].opaque.parameters.colour: unknown field of SampleConfig"),
        (sample(mode=3), r"config\[0\].opaque.parameters.mode: must be a string, not int"),  # type: ignore[arg-type]
        (sample(mode="z"), r"config\[0\].opaque.parameters.mode: 'z' is not one of a, b, c"),
        (sample(name="A1"), r"config\[0\].opaque.parameters.name: 'A1' is not lower-case letters"),
        ("text", r"config\[0\].opaque.parameters: is not an object"),
    ],
)
def test_parameters_the_driver_does_not_accept_fail_naming_claim_request_and_field(
    parameters: object, message: str
) -> None:
    allocated = claim(UID, result("card0", request="gpu/big"))
    allocated["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}
    ]
    with pytest.raises(ClaimError, match=r"ResourceClaim ns/claim: request gpu/big: .*" + message):
        allocated_devices(allocated, REF, DRIVER, NODE, KINDS)


def test_a_driver_declaring_no_kinds_refuses_opaque_parameters_addressed_to_it() -> None:
    allocated = claim(UID, result("card0"))
    allocated["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"afuId": "x"}}}
    ]
    with pytest.raises(
        ClaimError, match=rf"config\[0\].opaque.parameters: driver {DRIVER} accepts no opaque"
    ):
        allocated_devices(allocated, REF, DRIVER, NODE)


def test_non_opaque_configuration_for_this_drivers_requests_is_refused() -> None:
    allocated = claim(
        UID, result("card0", request="gpu"), result("nic0", request="nic", driver="net.example.com")
    )
    allocated["status"]["allocation"]["devices"]["config"] = [
        {"source": "FromClaim", "requests": ["nic"], "opaque": None},  # another driver's request: not ours
        {"source": "FromClaim", "requests": ["gpu"], "opaque": None},
    ]
    with pytest.raises(ClaimError, match=r"request gpu: .*config\[1\]: only opaque parameters are supported"):
        allocated_devices(allocated, REF, DRIVER, NODE, KINDS)
    del allocated["status"]["allocation"]["devices"]["config"][1]
    assert [d.device for d in allocated_devices(allocated, REF, DRIVER, NODE, KINDS)] == ["card0"]


def test_configuration_that_is_not_a_list_is_refused_naming_the_field() -> None:
    allocated = claim(UID, result("card0"))
    allocated["status"]["allocation"]["devices"]["config"] = {"opaque": {}}
    with pytest.raises(ClaimError, match=r"status.allocation.devices.config is not a list"):
        allocated_devices(allocated, REF, DRIVER, NODE)
