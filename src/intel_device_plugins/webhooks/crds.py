"""The FPGA pod webhook's two ``fpga.intel.com/v2`` CRDs, and the standalone webhooks' configurations.

Rendered from ``webhooks/model.py``; ``python -m intel_device_plugins.cmd.crdgen`` writes them.
"""

from __future__ import annotations

from typing import Any, Final

from intel_device_plugins.kube.crdmodel import schema_of
from intel_device_plugins.kube.crds import crd_document, render_document
from intel_device_plugins.webhooks import model as fpga_model
from intel_device_plugins.webhooks.handlers import pod_webhook
from intel_device_plugins.webhooks.store import GROUP as FPGA_GROUP
from intel_device_plugins.webhooks.store import VERSION as FPGA_VERSION
from intel_device_plugins.webhooks.store import FpgaKind

POD_WEBHOOKS: Final = ("fpga", "sgx")


def fpga_crd(kind: FpgaKind) -> dict[str, Any]:
    """CRD of an ``fpga.intel.com/v2`` kind: namespaced, spec required, no subresources (as upstream)."""
    spec = schema_of(fpga_model.SPEC_CLASSES[kind], f"Desired state of the {kind.kind}.")
    schema = {
        "type": "object",
        "description": fpga_model.DESCRIPTIONS[kind],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object", "description": "Empty: nothing is reported."},
        },
        "required": ["spec"],
    }
    return crd_document(
        FPGA_GROUP,
        FPGA_VERSION,
        kind,
        scope="Namespaced",
        schema=schema,
        short_names=(kind.short_name,),
        status=False,
    )


def fpga_crd_filename(kind: FpgaKind) -> str:
    return f"{FPGA_GROUP}_{kind.plural}.yaml"


def render_fpga(kind: FpgaKind) -> str:
    return render_document(fpga_crd(kind))


def pod_webhook_entries() -> dict[str, dict[str, Any]]:
    """The pod webhooks' entries for the operator's MutatingWebhookConfiguration, by kind."""
    return {which: pod_webhook(which) for which in POD_WEBHOOKS}


def standalone_webhook_files() -> dict[str, str]:
    """The MutatingWebhookConfiguration of each standalone pod webhook, under ``deploy/webhooks``."""
    out = {}
    for which in POD_WEBHOOKS:
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [pod_webhook(which)],
        }
        out[f"{which}/base/webhook.yaml"] = render_document(config)
    return out
