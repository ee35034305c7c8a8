"""The GPU driver's monitoring claim template against the real API server (the classes are checked
with every kind's in ``test_k8s_dra_classes.py``)."""

from __future__ import annotations

import pytest

from intel_device_plugins.plugins.gpu.dra import ADMIN_ACCESS_NAMESPACE_LABEL, monitoring_claim_template
from k8stest.kubeclient import ApiError, KubeClient

pytestmark = pytest.mark.k8s


def test_monitoring_claim_template_is_accepted_in_an_admin_access_namespace(k8s_admin: KubeClient) -> None:
    namespace = "gpu-monitoring-dra"
    k8s_admin.apply_ok(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {ADMIN_ACCESS_NAMESPACE_LABEL: "true"}},
        },
    )
    template = monitoring_claim_template(namespace)

    created = k8s_admin.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates?dryRun=All&fieldValidation=Strict",
        template,
    )

    assert created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] is True


def test_the_same_template_is_refused_in_an_ordinary_namespace(k8s_admin: KubeClient) -> None:
    """The acceptance above is the label's doing: the check can fail."""
    namespace = "gpu-monitoring-plain"
    k8s_admin.apply_ok(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )

    with pytest.raises(ApiError) as refused:
        k8s_admin.request(
            "POST",
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates?dryRun=All",
            monitoring_claim_template(namespace),
        )

    assert refused.value.status in (403, 422)
    assert "admin" in str(refused.value).lower()
