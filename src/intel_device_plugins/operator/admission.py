"""AdmissionReview handling for the CR defaulting and validating webhooks, as pure functions.

The HTTP server only decodes JSON and calls ``handle_review``; all decisions live here, so the accept
and reject tables run without a server. Malformed reviews are answered, never raised.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from intel_device_plugins.operator.kinds import GROUP, DeviceKind
from intel_device_plugins.operator.validation import default_spec, validate_object

Operation = Literal["mutate", "validate"]
REVIEW_API_VERSION: Final = "admission.k8s.io/v1"


def _response(uid: str, allowed: bool, message: str = "", code: int = 200, **extra: Any) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if message:
        resp["status"] = {
            "code": code,
            "message": message,
            "reason": "Invalid" if code == 422 else "BadRequest",
        }
    resp.update({k: v for k, v in extra.items() if v})
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": resp}


def default_patch(kind: DeviceKind, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch that applies the defaults to ``obj``; empty when nothing changes."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [{"op": "add", "path": "/spec", "value": default_spec(kind, None)}]
    defaulted = default_spec(kind, spec)
    return [
        {"op": "add" if key not in spec else "replace", "path": f"/spec/{key}", "value": value}
        for key, value in defaulted.items()
        if spec.get(key) != value
    ]


def handle_review(kind: DeviceKind, operation: Operation, review: Mapping[str, Any]) -> dict[str, Any]:
    """Answer one AdmissionReview for ``kind``'s mutating or validating path."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return _response("", False, "malformed AdmissionReview: no request", 400)
    uid = str(request.get("uid", ""))
    req_kind = request.get("kind") or {}
    if req_kind.get("group") != GROUP or req_kind.get("kind") != kind.kind:
        return _response(
            uid, False, f"unexpected object kind {req_kind.get('kind')!r} for {kind.kind} webhook", 400
        )
    if request.get("operation") == "DELETE":
        return _response(uid, True)
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        return _response(uid, False, "malformed AdmissionReview: no object", 400)
    if operation == "mutate":
        ops = default_patch(kind, obj)
        if not ops:
            return _response(uid, True)
        patch = base64.b64encode(json.dumps(ops).encode()).decode()
        return _response(uid, True, patchType="JSONPatch", patch=patch)
    verdict = validate_object(kind, obj)
    if not verdict.allowed:
        return _response(uid, False, verdict.message, 422, warnings=list(verdict.warnings))
    return _response(uid, True, warnings=list(verdict.warnings))


def routes() -> dict[str, tuple[DeviceKind, Operation]]:
    """URL path → (kind, operation) for all kinds; served regardless of ``--devices``."""
    out: dict[str, tuple[DeviceKind, Operation]] = {}
    for kind in DeviceKind:
        out[kind.mutate_path] = (kind, "mutate")
        out[kind.validate_path] = (kind, "validate")
    return out


def review_handlers() -> dict[str, Callable[[Any], Mapping[str, Any]]]:
    """URL path → AdmissionReview handler for the 16 CR webhook paths, as the HTTPS server takes them."""
    return {path: functools.partial(handle_review, kind, op) for path, (kind, op) in routes().items()}
