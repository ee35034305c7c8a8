"""Pods, AdmissionReviews and FPGA objects for the webhook tests (upstream's sample IDs)."""

from __future__ import annotations

import base64
import json
from typing import Any

IFACE = "69528db6eb31577a8c3668f9faa081f6"  # arria10.dcp1.2
NLB0 = "d8424dc4a4a3c413f89e433683f9040b"
NLB3 = "f7df405cbd7acf7222f144b0b93acd18"
IFACE_D5005 = "bfac4d851ee856fe8c95865ce1bbaa2d"
AF_NLB0 = "fpga.intel.com/af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
REGION = f"fpga.intel.com/region-{IFACE}"


def af(
    name: str, afu: str = NLB0, mode: str = "af", iface: str = IFACE, ns: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "fpga.intel.com/v2",
        "kind": "AcceleratorFunction",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"afuId": afu, "interfaceId": iface, "mode": mode},
    }


def region(name: str, iface: str = IFACE, ns: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "fpga.intel.com/v2",
        "kind": "FpgaRegion",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"interfaceId": iface},
    }


def with_resources(name: str, amounts: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "resources": {"limits": dict(amounts), "requests": dict(amounts)},
        **extra,
    }


def pod(
    *containers: dict[str, Any], ns: str = "default", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": ns}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers)}}


def review(
    obj: Any, uid: str = "u1", resource: dict[str, str] | None = None, ns: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": resource or {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "object": obj,
        },
    }


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    resp = answer["response"]
    if "patch" not in resp:
        return []
    assert resp["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"]))
    return ops
