"""Every kind's DeviceClasses pass the real API server's validation (CEL compiled, names, mapping)."""

from __future__ import annotations

import pytest

from intel_device_plugins.dra.classes import DeviceClassSpec, device_class, with_intel_extended_resources
from intel_device_plugins.plugins.dlb.dra import DLB_DEVICE_CLASSES
from intel_device_plugins.plugins.fpga.dra import FPGA_DEVICE_CLASSES
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES
from intel_device_plugins.plugins.idxd.dra import DSA_DEVICE_CLASSES, IAA_DEVICE_CLASSES
from intel_device_plugins.plugins.npu.dra import NPU_DEVICE_CLASSES
from intel_device_plugins.plugins.qat.dra import QAT_DEVICE_CLASSES
from intel_device_plugins.plugins.sgx.dra import SGX_DEVICE_CLASSES
from k8stest.kubeclient import ApiError, KubeClient

pytestmark = pytest.mark.k8s

CLASSES = (
    *DLB_DEVICE_CLASSES,
    *DSA_DEVICE_CLASSES,
    *FPGA_DEVICE_CLASSES,
    *GPU_DEVICE_CLASSES,
    *IAA_DEVICE_CLASSES,
    *NPU_DEVICE_CLASSES,
    *QAT_DEVICE_CLASSES,
    *SGX_DEVICE_CLASSES,
)


@pytest.mark.parametrize("spec", CLASSES, ids=lambda spec: spec.name)
def test_the_api_server_accepts_the_class(k8s_admin: KubeClient, spec: DeviceClassSpec) -> None:
    created = k8s_admin.create("/apis/resource.k8s.io/v1/deviceclasses?dryRun=All", device_class(spec))
    assert created["metadata"]["name"] == spec.name
    assert created["spec"].get("extendedResourceName") == spec.extended_resource_name


@pytest.mark.parametrize(
    "spec",
    [
        s
        for s in with_intel_extended_resources(CLASSES)
        if s.extended_resource_name in ("intel.com/gpu", "intel.com/qat")
    ],
    ids=lambda spec: spec.name,
)
def test_the_api_server_accepts_intels_extended_resources(
    k8s_admin: KubeClient, spec: DeviceClassSpec
) -> None:
    created = k8s_admin.create("/apis/resource.k8s.io/v1/deviceclasses?dryRun=All", device_class(spec))
    assert created["spec"]["extendedResourceName"] == spec.extended_resource_name


def test_a_selector_that_does_not_compile_is_refused(k8s_admin: KubeClient) -> None:
    """The check above can fail: the server compiles the CEL it is given."""
    broken = device_class(DeviceClassSpec("broken.example.com", "example.com", selector="device.attributes["))
    with pytest.raises(ApiError) as refused:
        k8s_admin.create("/apis/resource.k8s.io/v1/deviceclasses?dryRun=All", broken)
    assert refused.value.status == 422
