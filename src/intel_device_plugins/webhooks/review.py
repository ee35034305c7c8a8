"""AdmissionReview in, AdmissionReview out, for the pod webhooks; pure, and never raising on bad input."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from intel_device_plugins.webhooks.jsonpatch import Op
from intel_device_plugins.webhooks.pod import DecodeError, Denied, check_pod

REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
POD_RESOURCE: Final = {"group": "", "version": "v1", "resource": "pods"}

# (pod, namespace) → patch operations; raises Denied to refuse the pod.
PodMutation = Callable[[Mapping[str, Any], str], list[Op]]


def answer(
    uid: str, allowed: bool, message: str = "", code: int = 200, ops: list[Op] | None = None
) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if message:
        reason = {400: "BadRequest", 403: "Forbidden"}.get(code, "")
        resp["status"] = {"code": code, "message": message, **({"reason": reason} if reason else {})}
    if ops:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": resp}


def handle_pod_review(review: Any, mutate: PodMutation) -> dict[str, Any]:
    """Answer one pod AdmissionReview: a patch, an allowed no-op, or a denial with a message."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return answer("", False, "malformed AdmissionReview: no request", 400)
    uid = request.get("uid")
    uid = uid if isinstance(uid, str) else ""
    resource = request.get("resource")
    if not isinstance(resource, Mapping) or any(resource.get(k) != v for k, v in POD_RESOURCE.items()):
        shown = (
            "/".join(str(resource.get(k, "")) for k in ("group", "version", "resource"))
            if isinstance(resource, Mapping)
            else str(resource)
        )
        return answer(uid, False, f"unexpected resource type {shown!r}, expected v1 pods", 400)
    pod = request.get("object")
    if pod is None:  # e.g. a DELETE: nothing to mutate
        return answer(uid, True)
    try:
        check_pod(pod)
    except DecodeError as exc:
        return answer(uid, False, f"cannot decode the pod: {exc}", 400)
    namespace = pod.get("metadata", {}).get("namespace") or request.get("namespace") or ""
    if not isinstance(namespace, str):
        return answer(uid, False, "cannot decode the request: namespace must be a string", 400)
    try:
        ops = mutate(pod, namespace)
    except Denied as exc:
        return answer(uid, False, str(exc), 403)
    return answer(uid, True, ops=ops)
