"""The GPU driver's DeviceClasses and monitoring claim template against the real API server.

A dry-run create runs every validation and defaulting step the API server has, so a class the
server would refuse (a bad CEL expression, an invalid extended resource name) fails here.
"""

from __future__ import annotations

import pytest

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import (
    ADMIN_ACCESS_NAMESPACE_LABEL,
    GPU_DEVICE_CLASSES,
    monitoring_claim_template,
)
from k8stest.kubeclient import ApiError, KubeClient

pytestmark = pytest.mark.k8s

CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def test_device_classes_pass_the_api_servers_validation(k8s_admin: KubeClient) -> None:
    for spec in GPU_DEVICE_CLASSES:
        wanted = device_class(spec)
        created = k8s_admin.request("POST", f"{CLASSES}?dryRun=All&fieldValidation=Strict", wanted)

        assert created["metadata"]["name"] == spec.name
        assert created["spec"] == wanted["spec"]


def test_a_broken_selector_is_refused_so_the_check_above_can_fail(k8s_admin: KubeClient) -> None:
    broken = device_class(GPU_DEVICE_CLASSES[0])
    broken["spec"]["selectors"][0]["cel"]["expression"] = "device.driver =="

    with pytest.raises(ApiError) as refused:
        k8s_admin.request("POST", f"{CLASSES}?dryRun=All", broken)

    assert refused.value.status == 422


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
