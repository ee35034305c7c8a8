"""AdmissionReview answers for every kind's defaulting and validating webhook."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from intel_device_plugins.operator import images
from intel_device_plugins.operator.admission import default_patch, handle_review, routes
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind


def review(kind: DeviceKind, obj: Any, operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "deviceplugin.intel.com", "version": "v1", "kind": kind.kind},
            "operation": operation,
            "object": obj,
        },
    }


def decoded_patch(resp: dict[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(resp["response"]["patch"]))
    return ops


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_mutate_sets_default_image(kind: DeviceKind) -> None:
    resp = handle_review(kind, "mutate", review(kind, {"spec": {"logLevel": 1}}))
    assert resp["response"]["allowed"] is True and resp["response"]["uid"] == "u-1"
    assert resp["response"]["patchType"] == "JSONPatch"
    assert decoded_patch(resp) == [{"op": "add", "path": "/spec/image", "value": images.node_image()}]


def test_mutate_replaces_empty_image_and_adds_missing_spec() -> None:
    k = DeviceKind.GPU
    assert decoded_patch(handle_review(k, "mutate", review(k, {"spec": {"image": ""}})))[0]["op"] == "replace"
    assert decoded_patch(handle_review(k, "mutate", review(k, {})))[0]["path"] == "/spec"
    untouched = handle_review(k, "mutate", review(k, {"spec": {"image": "intel/intel-gpu-plugin:0.36.0"}}))
    assert "patch" not in untouched["response"]
    assert default_patch(k, {"spec": {"image": "x"}}) == []


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_validate_rejects_with_field_and_code(kind: DeviceKind) -> None:
    resp = handle_review(kind, "validate", review(kind, {"spec": {"image": "intel/wrong:0.36.0"}}))
    r = resp["response"]
    assert r["allowed"] is False and r["status"]["code"] == 422
    assert r["status"]["message"].startswith("invalid resource: spec.image: incorrect image name")


def test_validate_accepts_with_warnings() -> None:
    k = DeviceKind.GPU
    ok = handle_review(k, "validate", review(k, {"spec": {"image": "intel/intel-gpu-plugin:0.30.0"}}))
    assert ok["response"]["allowed"] is True and ok["response"]["warnings"]


def test_delete_is_always_allowed() -> None:
    k = DeviceKind.QAT
    assert handle_review(k, "validate", review(k, None, "DELETE"))["response"]["allowed"] is True


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"request": "x"},
        {"request": {"uid": "u", "kind": {"group": "deviceplugin.intel.com", "kind": "QatDevicePlugin"}}},
        [],
    ],
)
def test_malformed_reviews_are_answered(body: Any) -> None:
    resp = handle_review(DeviceKind.GPU, "validate", body)
    assert resp["response"]["allowed"] is False and resp["response"]["status"]["code"] == 400


def test_routes_cover_every_kind() -> None:
    r = routes()
    assert len(r) == 16
    assert r["/validate-deviceplugin-intel-com-v1-gpudeviceplugin"] == (DeviceKind.GPU, "validate")
    assert r["/mutate-deviceplugin-intel-com-v1-sgxdeviceplugin"] == (DeviceKind.SGX, "mutate")
