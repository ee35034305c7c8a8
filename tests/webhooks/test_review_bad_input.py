"""Malformed AdmissionReviews, wrong kinds, huge pods: a clear denial or an allowed no-op, never a raise."""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.webhooks.handlers import fpga_review, sgx_review
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore
from tests.webhooks.podfixtures import pod, review, with_resources


def _synced_empty_store() -> MappingStore:
    store = MappingStore()
    for kind in FpgaKind:
        store.replace(kind, [])
    return store


HANDLERS = {"fpga": fpga_review(_synced_empty_store()), "sgx": sgx_review}


@pytest.mark.parametrize("which", HANDLERS)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "malformed AdmissionReview: no request"),
        ([], "malformed AdmissionReview: no request"),
        ({"request": "x"}, "malformed AdmissionReview: no request"),
        ({"request": {"uid": "u"}}, "unexpected resource type 'None', expected v1 pods"),
        (
            review({}, resource={"group": "apps", "version": "v1", "resource": "deployments"}),
            "unexpected resource type 'apps/v1/deployments', expected v1 pods",
        ),
        (review([]), "cannot decode the pod: object: must be an object"),
        (review({"spec": []}), "cannot decode the pod: spec: must be an object"),
        (review({"spec": {"containers": {}}}), "cannot decode the pod: spec.containers: must be a list"),
        (
            review({"spec": {"containers": [1]}}),
            "cannot decode the pod: spec.containers[0]: must be an object",
        ),
        (
            review({"spec": {"containers": [{"name": "c", "resources": {"limits": {"x": [1]}}}]}}),
            "cannot decode the pod: spec.containers[0].resources.limits[x]: must be a quantity",
        ),
        (
            review({"spec": {"containers": [{"name": "c", "env": [{"name": 3}]}]}}),
            "cannot decode the pod: spec.containers[0].env[0].name: must be a string",
        ),
        (
            review({"metadata": {"annotations": {"a": 1}}, "spec": {"containers": []}}),
            "cannot decode the pod: metadata.annotations[a]: must be a string",
        ),
        (
            review({"spec": {"containers": [{"name": "c"}] * 10_001}}),
            "cannot decode the pod: spec.containers: more than 10000 containers",
        ),
    ],
)
def test_malformed_reviews_are_denied_with_a_message(which: str, body: Any, message: str) -> None:
    answer = HANDLERS[which](body)
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == message
    assert answer["response"]["status"]["code"] == 400


@pytest.mark.parametrize("which", HANDLERS)
def test_request_without_object_is_allowed_unchanged(which: str) -> None:
    answer = HANDLERS[which](review(None, uid="abc"))
    assert answer["response"] == {"uid": "abc", "allowed": True}


@pytest.mark.parametrize("which", HANDLERS)
def test_thousands_of_containers_are_answered(which: str) -> None:
    key = "sgx.intel.com/epc" if which == "sgx" else "fpga.intel.com/none"
    many = pod(*(with_resources(f"c{i}", {"cpu": "1"}) for i in range(5000)), with_resources("x", {key: "1"}))
    answer = HANDLERS[which](review(many))["response"]
    if which == "sgx":
        assert answer["allowed"] is True and answer["patch"]
    else:
        assert answer == {
            "uid": "u1",
            "allowed": False,
            "status": {"code": 403, "message": f'no such resource: "{key}"', "reason": "Forbidden"},
        }


def test_huge_quantity_strings_are_refused_not_parsed() -> None:
    c = {"name": "c", "resources": {"limits": {"sgx.intel.com/epc": "9" * 5000}, "requests": {}}}
    answer = sgx_review(review(pod(c)))["response"]
    assert answer["allowed"] is False
    assert "longer than 40 characters" in answer["status"]["message"]
