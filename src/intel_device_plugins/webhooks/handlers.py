"""The pod webhooks' paths and their AdmissionReview handlers, for whichever server serves them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from intel_device_plugins.webhooks import fpga, sgx
from intel_device_plugins.webhooks.jsonpatch import Op
from intel_device_plugins.webhooks.pod import Denied, containers, requested
from intel_device_plugins.webhooks.review import handle_pod_review
from intel_device_plugins.webhooks.store import MappingStore

FPGA_PATH: Final = "/pods"
SGX_PATH: Final = "/mutate--v1-pod"


NOT_SYNCED: Final = "FPGA mappings are not loaded yet (AcceleratorFunctions and FpgaRegions): try again"


def fpga_review(store: MappingStore) -> Any:
    """Until both kinds are listed, a pod asking for any fpga.intel.com resource is refused with a message
    saying why (retried by its controller), rather than denied for a mapping not seen yet."""

    def mutate(pod: Mapping[str, Any], namespace: str) -> list[Op]:
        if not store.synced and any(requested(c, fpga.PREFIX) for c in containers(pod)):
            raise Denied(NOT_SYNCED)
        return fpga.mutate_pod(pod, store.mappings(namespace))

    def handle(review: Any) -> Mapping[str, Any]:
        return handle_pod_review(review, mutate)

    return handle


def sgx_review(review: Any) -> Mapping[str, Any]:
    return handle_pod_review(review, lambda pod, _ns: sgx.mutate_pod(pod))


# Keep the webhooks away from the control plane's own pods: a broken webhook must not block kube-system.
NAMESPACE_SELECTOR: Final = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
    ]
}


def pod_webhook(which: str, service: str = "webhook-service", namespace: str = "system") -> dict[str, Any]:
    """One MutatingWebhookConfiguration entry for the ``fpga`` or ``sgx`` pod webhook (upstream's names,
    paths, failurePolicy and sideEffects, plus the namespace selector)."""
    path = {"fpga": FPGA_PATH, "sgx": SGX_PATH}[which]
    entry: dict[str, Any] = {
        "name": f"{which}.mutator.webhooks.intel.com",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": service, "namespace": namespace, "path": path}},
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "namespaceSelector": NAMESPACE_SELECTOR,
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        ],
    }
    if which == "sgx":
        entry["reinvocationPolicy"] = "IfNeeded"
    return entry
