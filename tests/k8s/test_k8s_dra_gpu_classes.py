"""The GPU driver's DeviceClasses and monitoring claim template against the real API server.

A dry-run create runs every validation and defaulting step the API server has, so a class the
server would refuse (a bad CEL expression, an invalid extended resource name) fails here.
"""

from __future__ import annotations

import pytest

from intel_device_plugins.plugins.gpu.dra import gpu_device_classes, monitoring_claim_template
from k8stest.kubeclient import ApiError, KubeClient

pytestmark = pytest.mark.k8s

CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def test_device_classes_pass_the_api_servers_validation(k8s_admin: KubeClient) -> None:
    for device_class in gpu_device_classes(labels={"app.kubernetes.io/name": "intel-gpu-dra-driver"}):
        created = k8s_admin.request("POST", f"{CLASSES}?dryRun=All&fieldValidation=Strict", device_class)

        assert created["metadata"]["name"] == device_class["metadata"]["name"]
        assert created["spec"] == device_class["spec"]


def test_a_broken_selector_is_refused_so_the_check_above_can_fail(k8s_admin: KubeClient) -> None:
    (broken, *_) = gpu_device_classes()
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
            "metadata": {"name": namespace, "labels": {"resource.kubernetes.io/admin-access": "true"}},
        },
    )
    template = monitoring_claim_template(namespace)

    created = k8s_admin.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates?dryRun=All&fieldValidation=Strict",
        template,
    )

    assert created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] is True
