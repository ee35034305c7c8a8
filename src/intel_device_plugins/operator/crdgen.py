"""The CustomResourceDefinitions of all eight kinds and the CR webhook configurations, from the typed model.

``python -m intel_device_plugins.cmd.crdgen`` writes them (with the pod webhooks' parts) into ``deploy/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import yaml

from intel_device_plugins.kube.crdmodel import schema_of
from intel_device_plugins.kube.crds import HEADER, crd_document, render_document
from intel_device_plugins.operator.kinds import ALL_KINDS, GROUP, VERSION, DeviceKind
from intel_device_plugins.operator.model import SPEC_CLASSES, STATUS_SCHEMA
from intel_device_plugins.operator.registry import PROFILES

#: The subdirectory of the CRD directory holding the FPGA pod webhook's CRDs.
FPGA_CRD_DIR: Final = "fpga"

PRINTER_COLUMNS: tuple[dict[str, str], ...] = (
    {"jsonPath": ".status.desiredNumberScheduled", "name": "Desired", "type": "integer"},
    {"jsonPath": ".status.numberReady", "name": "Ready", "type": "integer"},
    {"jsonPath": ".spec.nodeSelector", "name": "Node Selector", "type": "string"},
    {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
)


def spec_schema(kind: DeviceKind) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of ``spec`` for ``kind``."""
    return schema_of(SPEC_CLASSES[kind], f"Desired state of the {kind.kind}.")


def crd(kind: DeviceKind) -> dict[str, Any]:
    """The full CRD object for ``kind`` (cluster scoped, v1 served and stored, status subresource)."""
    return crd_document(
        GROUP,
        VERSION,
        kind,
        scope="Cluster",
        schema={
            "type": "object",
            "description": f"{kind.kind} runs the Intel {kind.value.upper()} device plugin "
            "as a DaemonSet on the selected nodes.",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": spec_schema(kind),
                "status": STATUS_SCHEMA,
            },
        },
        printer_columns=PRINTER_COLUMNS,
    )


def crd_filename(kind: DeviceKind) -> str:
    return f"{GROUP}_{kind.plural}.yaml"


def render(kind: DeviceKind) -> str:
    """Deterministic YAML text of one CRD file."""
    return render_document(crd(kind), HEADER)


def render_kustomization(names: list[str] | None = None) -> str:
    """The CRD directory's kustomization: the eight plugin CRDs and the ``fpga`` subdirectory (the FPGA
    webhook's two CRDs, which the standalone FPGA webhook installs on their own)."""
    if names is None:
        names = [crd_filename(k) for k in ALL_KINDS] + [FPGA_CRD_DIR]
    files = "".join(f"- {n}\n" for n in names)
    return HEADER + "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + files


# The defaulting webhook changes only an empty or missing ``spec.image`` (``validation.default_spec``); for
# any other CR its answer is "allowed, no patch". The API server evaluates this CEL condition itself and calls
# the webhook only when there is something to default, which saves a webhook round trip per create of a CR
# that names its image (every sample does). A server that errs evaluating it fails closed (``Fail``).
DEFAULTING_CONDITION: Final = "image-to-default"
DEFAULTING_EXPRESSION: Final = '!has(object.spec) || !has(object.spec.image) || object.spec.image == ""'


def webhook_configurations(pod_webhooks: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Mutating and validating configurations with one entry per kind (upstream's names and paths).

    The operator serves every kind's CR webhooks even when ``--devices`` limits the controllers. The FPGA and
    SGX pod webhooks (``pod_webhooks``, by kind) are served only when their kind is enabled; they fail open
    (``Ignore``), so a pod passes unchanged when its webhook is not served. As in upstream's manifests the
    FPGA one comes first and the SGX one last.
    """

    def entry(kind: DeviceKind, prefix: str, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": f"{prefix}{kind.singular}.kb.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": [VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [kind.plural],
                }
            ],
        }
        if prefix == "m":
            out["matchConditions"] = [{"name": DEFAULTING_CONDITION, "expression": DEFAULTING_EXPRESSION}]
            if PROFILES[kind].reinvoke_defaulting:
                out["reinvocationPolicy"] = "IfNeeded"
        return out

    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                pod_webhooks["fpga"],
                *(entry(k, "m", k.mutate_path) for k in ALL_KINDS),
                pod_webhooks["sgx"],
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [entry(k, "v", k.validate_path) for k in ALL_KINDS],
        },
    ]


def render_webhooks(pod_webhooks: Mapping[str, dict[str, Any]]) -> str:
    docs = [
        yaml.safe_dump(d, sort_keys=True, default_flow_style=False, width=120)
        for d in webhook_configurations(pod_webhooks)
    ]
    return HEADER + "---\n".join(docs)
