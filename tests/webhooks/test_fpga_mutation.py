"""FPGA pod mutation: every message and every patch, through the AdmissionReview handler."""

from __future__ import annotations

import json
from typing import Any

import pytest

from intel_device_plugins.webhooks import fpga
from intel_device_plugins.webhooks.handlers import fpga_review
from intel_device_plugins.webhooks.jsonpatch import apply
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore
from tests.webhooks.podfixtures import (
    AF_NLB0,
    IFACE,
    IFACE_D5005,
    NLB0,
    NLB3,
    REGION,
    af,
    patch_of,
    pod,
    region,
    review,
    with_resources,
)

NLB0_PRE = "fpga.intel.com/arria10-nlb0-preprogrammed"
NLB0_ORCH = "fpga.intel.com/arria10-nlb0-orchestrated"
NLB3_ORCH = "fpga.intel.com/arria10-nlb3-orchestrated"
REGION_NAME = "fpga.intel.com/arria10"
OVERCOMMIT = (
    f"'limits' and 'requests' for \"{NLB0_PRE}\" must be equal as extended resources cannot be overcommitted"
)


def store_with(*objs: dict[str, Any]) -> MappingStore:
    store = MappingStore()
    store.replace(FpgaKind.ACCELERATOR_FUNCTION, [o for o in objs if o["kind"] == "AcceleratorFunction"])
    store.replace(FpgaKind.FPGA_REGION, [o for o in objs if o["kind"] == "FpgaRegion"])
    return store


STORE = store_with(
    af("arria10-nlb0-preprogrammed"),
    af("arria10-nlb0-orchestrated", mode="region"),
    af("arria10-nlb3-orchestrated", afu=NLB3, mode="region"),
    af("d5005-nlb0-orchestrated", iface=IFACE_D5005, mode="region"),
    af("legacy-afx", mode="afx"),
    region("arria10"),
    af("arria10-nlb0-preprogrammed", ns="other", afu=NLB3),
)
HANDLE = fpga_review(STORE)


def run(p: dict[str, Any]) -> dict[str, Any]:
    return dict(HANDLE(review(p))["response"])


def ops_for(p: dict[str, Any]) -> list[dict[str, Any]]:
    answer = HANDLE(review(p))
    assert answer["response"]["allowed"], answer
    return patch_of(dict(answer))


def test_device_type_matches_upstream_readme() -> None:
    assert "fpga.intel.com/" + fpga.af_device_type(IFACE, NLB0) == AF_NLB0


def test_af_mode_maps_name_to_device_type() -> None:
    ops = ops_for(pod(with_resources("c", {NLB0_PRE: "1", "cpu": "1"})))
    assert ops == [
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/limits/fpga.intel.com~1arria10-nlb0-preprogrammed",
        },
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/requests/fpga.intel.com~1arria10-nlb0-preprogrammed",
        },
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/" + AF_NLB0.replace("/", "~1"),
            "value": "1",
        },
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests/" + AF_NLB0.replace("/", "~1"),
            "value": "1",
        },
    ]


def test_region_mode_sets_numbered_env_sorted_and_keeps_value_from() -> None:
    env = [
        {"name": "ZED", "value": 'quote " and \\ back'},
        {"name": "FPGA_REGION_7", "value": "stale"},
        {"name": "FPGA_AFUX", "value": "stale too"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    p = pod(with_resources("c", {NLB0_ORCH: "1", NLB3_ORCH: "1"}, env=env))
    ops = ops_for(p)
    assert ops[-1] == {
        "op": "add",
        "path": "/spec/containers/0/env",
        "value": [
            {"name": "FPGA_AFU_1", "value": NLB0},
            {"name": "FPGA_AFU_2", "value": NLB3},
            {"name": "FPGA_REGION_1", "value": IFACE},
            {"name": "FPGA_REGION_2", "value": IFACE},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ZED", "value": 'quote " and \\ back'},
        ],
    }
    assert ops[:-1] == [
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/limits/fpga.intel.com~1arria10-nlb0-orchestrated",
        },
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/requests/fpga.intel.com~1arria10-nlb0-orchestrated",
        },
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/limits/fpga.intel.com~1arria10-nlb3-orchestrated",
        },
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/requests/fpga.intel.com~1arria10-nlb3-orchestrated",
        },
        {
            "op": "add",
            "path": f"/spec/containers/0/resources/limits/fpga.intel.com~1region-{IFACE}",
            "value": "2",
        },
        {
            "op": "add",
            "path": f"/spec/containers/0/resources/requests/fpga.intel.com~1region-{IFACE}",
            "value": "2",
        },
    ]
    # The patch is JSON as the API server reads it: the value with quotes survives a round trip.
    mutated = apply(p, json.loads(json.dumps(ops)))
    assert mutated["spec"]["containers"][0]["env"][-1]["value"] == 'quote " and \\ back'


def test_region_quantity_counts_units() -> None:
    ops = ops_for(pod(with_resources("c", {NLB3_ORCH: "3"})))
    env = ops[-1]["value"]
    assert [e["name"] for e in env] == [
        "FPGA_AFU_1", "FPGA_AFU_2", "FPGA_AFU_3", "FPGA_REGION_1", "FPGA_REGION_2", "FPGA_REGION_3",
    ]  # fmt: skip
    assert ops[2]["value"] == "3"


def test_fpga_region_maps_to_region_resource_without_env() -> None:
    ops = ops_for(pod(with_resources("c", {REGION_NAME: "2"})))
    assert [o["op"] for o in ops] == ["remove", "remove", "add", "add"]
    assert ops[2] == {
        "op": "add",
        "path": f"/spec/containers/0/resources/limits/{REGION.replace('/', '~1')}",
        "value": "2",
    }


def test_identity_resource_passes_and_other_resources_are_still_mapped() -> None:
    """Upstream skipped the whole container once it met an already-mapped name; here the rest is mapped."""
    ops = ops_for(pod(with_resources("c", {AF_NLB0: "1", NLB0_PRE: "2"})))
    esc = AF_NLB0.replace("/", "~1")
    assert ops == [
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/limits/fpga.intel.com~1arria10-nlb0-preprogrammed",
        },
        {
            "op": "remove",
            "path": "/spec/containers/0/resources/requests/fpga.intel.com~1arria10-nlb0-preprogrammed",
        },
        {"op": "add", "path": f"/spec/containers/0/resources/limits/{esc}", "value": "3"},
        {"op": "add", "path": f"/spec/containers/0/resources/requests/{esc}", "value": "3"},
    ]


def test_only_identities_give_no_patch() -> None:
    assert ops_for(pod(with_resources("c", {AF_NLB0: "1"}))) == []


def test_containers_are_patched_by_index_and_init_containers_ignored() -> None:
    p = pod(with_resources("a", {"cpu": "1"}), with_resources("b", {NLB0_PRE: "1"}))
    p["spec"]["initContainers"] = [with_resources("init", {"fpga.intel.com/unknown": "1"})]
    ops = ops_for(p)
    assert {o["path"].split("/")[3] for o in ops} == {"1"}


def test_namespace_sees_only_its_own_mappings() -> None:
    other = ops_for(pod(with_resources("c", {NLB0_PRE: "1"}), ns="other"))
    assert other[2]["path"].endswith(
        "fpga.intel.com~1af-695.f7d." + fpga.af_device_type(IFACE, NLB3).split(".", 2)[2]
    )
    answer = run(pod(with_resources("c", {NLB0_ORCH: "1"}), ns="other"))
    assert answer["allowed"] is False
    assert answer["status"]["message"] == f'no such resource: "{NLB0_ORCH}"'


def test_request_namespace_used_when_pod_has_none() -> None:
    p = pod(with_resources("c", {NLB0_ORCH: "1"}))
    del p["metadata"]["namespace"]
    answer = HANDLE(review(p, ns="other"))["response"]
    assert answer["allowed"] is False


@pytest.mark.parametrize(
    ("limits", "requests", "message"),
    [
        (
            {NLB0_PRE: "1"},
            {NLB0_PRE: "2"},
            OVERCOMMIT,
        ),
        (
            {NLB0_PRE: "1"},
            {},
            OVERCOMMIT,
        ),
        (
            {NLB0_PRE: "500m"},
            {NLB0_PRE: "500m"},
            f'resource quantity isn\'t of integral type for "{NLB0_PRE}"',
        ),
        (
            {"fpga.intel.com/nope": "1"},
            {"fpga.intel.com/nope": "1"},
            'no such resource: "fpga.intel.com/nope"',
        ),
        (
            {"fpga.intel.com/legacy-afx": "1"},
            {"fpga.intel.com/legacy-afx": "1"},
            '"fpga.intel.com/legacy-afx" is registered with unknown mode "afx" instead of "af" or "region"',
        ),
        (
            {NLB0_PRE: "1", NLB0_ORCH: "1"},
            {NLB0_PRE: "1", NLB0_ORCH: "1"},
            "container cannot be scheduled as it requires resources operated in different modes",
        ),
        (
            {NLB0_ORCH: "1", REGION_NAME: "1"},
            {NLB0_ORCH: "1", REGION_NAME: "1"},
            "container cannot be scheduled as it requires resources operated in different modes",
        ),
        (
            {NLB0_ORCH: "1000"},
            {NLB0_ORCH: "1000"},
            f'"{NLB0_ORCH}": more than {fpga.MAX_REGION_UNITS} FPGA regions requested by one container',
        ),
        (
            {NLB0_PRE: "1x"},
            {NLB0_PRE: "1x"},
            f"invalid quantity for \"{NLB0_PRE}\": quantity '1x' is not a Kubernetes quantity",
        ),
    ],
)
def test_denials_carry_upstream_messages(
    limits: dict[str, str], requests: dict[str, str], message: str
) -> None:
    c = {"name": "c", "resources": {"limits": limits, "requests": requests}}
    answer = run(pod(c))
    assert answer["allowed"] is False
    assert answer["status"] == {"code": 403, "message": message, "reason": "Forbidden"}


def test_equal_quantities_in_different_notation_are_equal() -> None:
    c = {"name": "c", "resources": {"limits": {NLB0_PRE: "1"}, "requests": {NLB0_PRE: "1000m"}}}
    assert run(pod(c))["allowed"] is True


def test_two_functions_to_one_resource_are_summed() -> None:
    store = store_with(af("a"), af("b"))
    ops = patch_of(
        dict(
            fpga_review(store)(
                review(pod(with_resources("c", {"fpga.intel.com/a": "1", "fpga.intel.com/b": "2"})))
            )
        )
    )
    assert next(o for o in ops if o["op"] == "add")["value"] == "3"


def test_unmappable_function_is_reported_and_left_out() -> None:
    m = fpga.namespace_mappings([af("odd", afu="abc")], [])
    assert m.by_name == {}
    assert "not hex" in m.problems[0]


def test_af_wins_over_region_of_the_same_name() -> None:
    m = fpga.namespace_mappings([af("x")], [region("x")])
    assert m.by_name["fpga.intel.com/x"].resource == AF_NLB0


def test_store_forgets_deleted_and_relisted_objects() -> None:
    store = store_with(af("x"))
    assert "fpga.intel.com/x" in store.mappings("default").by_name
    store.delete(FpgaKind.ACCELERATOR_FUNCTION, af("x"))
    assert store.mappings("default").by_name == {}
    store.upsert(FpgaKind.ACCELERATOR_FUNCTION, af("y"))
    assert set(store.mappings("default").by_name) == {"fpga.intel.com/y"}
    store.replace(FpgaKind.ACCELERATOR_FUNCTION, [af("z")])
    assert set(store.mappings("default").by_name) == {"fpga.intel.com/z"}
    assert store.synced
