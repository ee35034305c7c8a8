"""Accept and reject tables for the defaulting and validating rules of every kind."""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.operator.images import PROJECT_VERSION, UPSTREAM_VERSION, node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.operator.validation import MESSAGE_PREFIX, default_spec, validate_object

V = "0.36.0"
DIGEST = "sha256:" + "0f" * 32


def img(kind: str, tag: str = V) -> str:
    return f"intel/intel-{kind}-plugin:{tag}"


ACCEPT: list[tuple[DeviceKind, dict[str, Any]]] = [
    (DeviceKind.DLB, {"image": img("dlb")}),
    (DeviceKind.DLB, {"image": img("dlb"), "initImage": f"intel/intel-dlb-initcontainer:{V}"}),
    (DeviceKind.DLB, {"image": img("dlb"), "initImage": f"intel/intel-dlb-initimage:{V}"}),
    (DeviceKind.DSA, {"image": img("dsa"), "sharedDevNum": 10, "driver": "vfio-pci"}),
    (
        DeviceKind.DSA,
        {
            "image": img("dsa"),
            "provisioningConfig": "cfg",
            "initImage": f"intel/intel-idxd-config-initcontainer:{V}",
        },
    ),
    (
        DeviceKind.FPGA,
        {"image": img("fpga"), "initImage": f"intel/intel-fpga-initcontainer:{V}", "mode": "region"},
    ),
    (DeviceKind.FPGA, {"image": img("fpga")}),
    (DeviceKind.FPGA, {"image": node_image(), "initImage": node_image(), "mode": "region"}),
    (DeviceKind.GPU, {"image": img("gpu"), "sharedDevNum": 2, "preferredAllocationPolicy": "packed"}),
    (DeviceKind.GPU, {"image": img("gpu"), "preferredAllocationPolicy": "none"}),
    (DeviceKind.GPU, {"image": img("gpu"), "sharedDevNum": 1000}),
    (DeviceKind.GPU, {"image": img("gpu"), "allowIDs": "0x56a0,0x56a1"}),
    (DeviceKind.GPU, {"image": img("gpu"), "denyIDs": "0x0bda"}),
    (DeviceKind.GPU, {"image": f"intel/intel-gpu-plugin@{DIGEST}"}),
    (DeviceKind.GPU, {"image": "registry.local:5000/mirror/intel-gpu-plugin:0.37.1"}),
    (DeviceKind.GPU, {"image": img("gpu", "0.31.0"), "resourceManager": True}),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "tolerations": [{"operator": "Exists"}], "nodeSelector": {"a": "b"}},
    ),
    (DeviceKind.IAA, {"image": img("iaa"), "sharedDevNum": 3}),
    (DeviceKind.NPU, {"image": img("npu"), "sharedDevNum": 1}),
    (
        DeviceKind.QAT,
        {
            "image": img("qat"),
            "provisioningConfig": "qat-config",
            "kernelVfDrivers": ["4xxxvf"],
            "initImage": f"intel/intel-qat-initcontainer:{V}",
        },
    ),
    (DeviceKind.QAT, {"image": img("qat"), "dpdkDriver": "igb_uio", "maxNumDevices": 4}),
    (
        DeviceKind.SGX,
        {
            "image": img("sgx"),
            "enclaveLimit": 110,
            "provisionLimit": 110,
            "initImage": f"intel/intel-sgx-initcontainer:{V}",
        },
    ),
]


@pytest.mark.parametrize(("kind", "spec"), ACCEPT, ids=lambda v: v.value if isinstance(v, DeviceKind) else "")
def test_accept(kind: DeviceKind, spec: dict[str, Any]) -> None:
    verdict = validate_object(kind, {"spec": spec})
    assert verdict.allowed, verdict.message
    assert verdict.message == ""


REJECT: list[tuple[DeviceKind, dict[str, Any], str, str]] = [
    (
        DeviceKind.DLB,
        {"image": img("dlb"), "initImage": "intel/other-init:0.36.0"},
        "spec.initImage",
        "incorrect image name \"other-init\". Make sure you use 'intel/intel-dlb-initcontainer'",
    ),
    (
        DeviceKind.DLB,
        {"image": "intel/intel-dlb-plugin"},
        "spec.image",
        'incorrect image field "intel/intel-dlb-plugin"',
    ),
    (
        DeviceKind.DSA,
        {"image": img("dsa"), "provisioningConfig": "cfg"},
        "spec.initImage",
        "ProvisioningConfig is set with no InitImage",
    ),
    (
        DeviceKind.DSA,
        {"image": img("dsa"), "sharedDevNum": 0},
        "spec.sharedDevNum",
        "should be greater than or equal to 1",
    ),
    (DeviceKind.DSA, {"image": img("dsa"), "driver": "uio"}, "spec.driver", 'unsupported value "uio"'),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "sharedDevNum": 40000},
        "spec.sharedDevNum",
        "should be less than or equal to 1000",
    ),
    (
        DeviceKind.IAA,
        {"image": img("iaa"), "sharedDevNum": 1001},
        "spec.sharedDevNum",
        "less than or equal to 1000",
    ),
    (
        DeviceKind.NPU,
        {"image": img("npu"), "sharedDevNum": 1001},
        "spec.sharedDevNum",
        "less than or equal to 1000",
    ),
    (
        DeviceKind.DSA,
        {"image": img("dsa"), "sharedDevNum": 1001},
        "spec.sharedDevNum",
        "less than or equal to 1000",
    ),
    (DeviceKind.FPGA, {"image": img("fpga"), "mode": "bogus"}, "spec.mode", 'unsupported value "bogus"'),
    (DeviceKind.FPGA, {"image": img("gpu")}, "spec.image", 'incorrect image name "intel-gpu-plugin"'),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "preferredAllocationPolicy": "balanced"},
        "spec.preferredAllocationPolicy",
        "'balanced' PreferredAllocationPolicy is valid only when setting sharedDevNum > 1",
    ),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "allowIDs": "0x56a0,"},
        "spec.allowIDs",
        "Empty PCI Device ID in AllowIDs",
    ),
    (DeviceKind.GPU, {"image": img("gpu"), "denyIDs": "56a0"}, "spec.denyIDs", "Invalid PCI Device ID: 56a0"),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "denyIDs": "0x56A0"},
        "spec.denyIDs",
        "Invalid PCI Device ID: 0x56A0",
    ),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "allowIDs": "0x56a0", "denyIDs": "0x56a1"},
        "spec.denyIDs",
        "AllowIDs and DenyIDs cannot be used together",
    ),
    (
        DeviceKind.GPU,
        {"image": img("gpu", "devel")},
        "spec.image",
        "Make sure it's either valid SHA digest or semver tag",
    ),
    (DeviceKind.GPU, {"image": img("gpu", "latest")}, "spec.image", "is not a semantic version"),
    (DeviceKind.GPU, {"image": "intel/intel-gpu-plugin@sha256:abc"}, "spec.image", "incorrect image digest"),
    (DeviceKind.GPU, {"image": img("gpu"), "sharedDevNum": "2"}, "spec.sharedDevNum", "must be an integer"),
    (DeviceKind.GPU, {"image": img("gpu"), "logLevel": -1}, "spec.logLevel", "greater than or equal to 0"),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "enableMonitoring": "yes"},
        "spec.enableMonitoring",
        "must be a boolean",
    ),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "nodeSelector": {"a": 1}},
        "spec.nodeSelector.a",
        "must be a string",
    ),
    (
        DeviceKind.GPU,
        {"image": img("gpu"), "tolerations": [{"tolerationSeconds": "x"}]},
        "spec.tolerations[0].tolerationSeconds",
        "must be an integer",
    ),
    (
        DeviceKind.IAA,
        {"image": img("iaa"), "provisioningConfig": "c"},
        "spec.initImage",
        "ProvisioningConfig is set with no InitImage",
    ),
    (
        DeviceKind.IAA,
        {"image": img("iaa"), "initImage": f"intel/intel-iaa-initcontainer:{V}"},
        "spec.initImage",
        "Make sure you use 'intel/intel-idxd-config-initcontainer'",
    ),
    (DeviceKind.NPU, {"image": img("npu"), "sharedDevNum": -3}, "spec.sharedDevNum", "greater than or equal"),
    (DeviceKind.NPU, {"image": ""}, "spec.image", "must not be empty"),
    (
        DeviceKind.QAT,
        {
            "image": img("qat"),
            "provisioningConfig": "c",
            "initImage": f"intel/intel-qat-initcontainer:{V}",
            "kernelVfDrivers": ["c6xxvf"],
        },
        "spec.provisioningConfig",
        "ProvisioningConfig is available only for 4xxx and 420xx devices",
    ),
    (
        DeviceKind.QAT,
        {"image": img("qat"), "kernelVfDrivers": ["nope"]},
        "spec.kernelVfDrivers[0]",
        'unsupported value "nope"',
    ),
    (
        DeviceKind.QAT,
        {"image": img("qat"), "maxNumDevices": 0},
        "spec.maxNumDevices",
        "greater than or equal",
    ),
    (DeviceKind.SGX, {"image": img("sgx"), "enclaveLimit": 0}, "spec.enclaveLimit", "greater than or equal"),
    (
        DeviceKind.SGX,
        {"image": img("sgx"), "initImage": "intel/intel-sgx-initcontainer:devel"},
        "spec.initImage",
        "semver tag",
    ),
]


@pytest.mark.parametrize(
    ("kind", "spec", "field", "text"), REJECT, ids=lambda v: v.value if isinstance(v, DeviceKind) else ""
)
def test_reject_names_the_field(kind: DeviceKind, spec: dict[str, Any], field: str, text: str) -> None:
    verdict = validate_object(kind, {"spec": spec})
    assert not verdict.allowed
    assert verdict.message.startswith(MESSAGE_PREFIX)
    assert f"{field}: " in verdict.message
    assert text in verdict.message


def test_every_kind_has_accept_and_reject_rows() -> None:
    assert {k for k, _ in ACCEPT} == set(ALL_KINDS)
    assert {k for k, *_ in REJECT} == set(ALL_KINDS)


def test_old_version_is_accepted_with_warning() -> None:
    verdict = validate_object(DeviceKind.QAT, {"spec": {"image": img("qat", "0.31.0")}})
    assert verdict.allowed
    assert any("spec.image" in w and UPSTREAM_VERSION in w for w in verdict.warnings)


@pytest.mark.parametrize(
    ("kind", "init_image", "deployed"),
    [
        (DeviceKind.DSA, "intel/intel-idxd-config-initcontainer:0.36.0", "0.37.2"),
        (DeviceKind.QAT, "intel/intel-qat-initcontainer:0.37.1", "0.37.2"),
        # upstream removed DLB in 0.37.0: its init image ends at 0.36.0
        (DeviceKind.DLB, "intel/intel-dlb-initcontainer:0.35.0", "0.36.0"),
    ],
)
def test_old_init_image_is_accepted_with_a_warning_naming_what_is_deployed(
    kind: DeviceKind, init_image: str, deployed: str
) -> None:
    verdict = validate_object(kind, {"spec": {"image": img(kind.value), "initImage": init_image}})
    assert verdict.allowed
    expected = init_image.rsplit(":", 1)[0] + ":" + deployed
    assert any(w.startswith("spec.initImage") and w.endswith(expected) for w in verdict.warnings)


def test_dlb_init_image_at_its_last_upstream_release_gets_no_warning() -> None:
    spec = {"image": img("dlb"), "initImage": "intel/intel-dlb-initcontainer:0.36.0"}
    verdict = validate_object(DeviceKind.DLB, {"spec": spec})
    assert verdict.allowed and not [w for w in verdict.warnings if w.startswith("spec.initImage")]


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_defaulting_sets_image_only_when_empty(kind: DeviceKind) -> None:
    defaulted = default_spec(kind, {"logLevel": 2})
    assert defaulted == {"logLevel": 2, "image": node_image()}
    assert validate_object(kind, {"spec": defaulted}).allowed
    assert default_spec(kind, {"image": "x/y:1.0.0"})["image"] == "x/y:1.0.0"
    assert default_spec(kind, None)["image"].endswith(f":{PROJECT_VERSION}")


DRA = {"image": node_image(), "deployAs": "DRADriver"}


@pytest.mark.parametrize(
    "spec",
    [
        DRA,
        # What upstream's GPU sample carries means "no sharing", which the driver does by default.
        {**DRA, "sharedDevNum": 1, "preferredAllocationPolicy": "none"},
        {**DRA, "initImage": f"intel/intel-gpu-initcontainer:{V}", "nodeSelector": {"gpu": "yes"}},
        {**DRA, "logLevel": 4, "tolerations": [{"operator": "Exists"}]},
        {"image": img("gpu"), "deployAs": "DevicePlugin", "sharedDevNum": 2},
    ],
)
def test_dra_driver_accepts_the_fields_it_uses(spec: dict[str, Any]) -> None:
    verdict = validate_object(DeviceKind.GPU, {"spec": spec})
    assert verdict.allowed, verdict.message


@pytest.mark.parametrize(
    ("extra", "field", "text"),
    [
        ({"sharedDevNum": 2}, "spec.sharedDevNum", "by capacity"),
        (
            {"sharedDevNum": 2, "preferredAllocationPolicy": "packed"},
            "spec.preferredAllocationPolicy",
            "scheduler",
        ),
        ({"preferredAllocationPolicy": "balanced"}, "spec.preferredAllocationPolicy", "DRADriver"),
        ({"enableMonitoring": True}, "spec.enableMonitoring", "admin-access"),
        ({"monitoringMode": "single"}, "spec.monitoringMode", "admin-access"),
        ({"bypathMode": "all"}, "spec.bypathMode", "CDI"),
        ({"allowIDs": "0x56a0"}, "spec.allowIDs", "pciId"),
        ({"denyIDs": "0x56a0"}, "spec.denyIDs", "pciId"),
        ({"image": img("gpu")}, "spec.image", "intel_gpu_dra_driver"),
        ({"image": f"intel/intel-gpu-plugin@{DIGEST}"}, "spec.image", "node image"),
        ({"deployAs": "Both"}, "spec.deployAs", "DRADriver"),
    ],
)
def test_dra_driver_rejects_plugin_only_fields_naming_them(
    extra: dict[str, Any], field: str, text: str
) -> None:
    verdict = validate_object(DeviceKind.GPU, {"spec": {**DRA, **extra}})
    assert not verdict.allowed
    assert f"{field}: " in verdict.message and text in verdict.message, verdict.message


def test_the_same_fields_stay_valid_for_the_device_plugin() -> None:
    spec = {
        "image": img("gpu"),
        "sharedDevNum": 2,
        "preferredAllocationPolicy": "packed",
        "bypathMode": "all",
    }
    assert validate_object(DeviceKind.GPU, {"spec": spec}).allowed
    assert not validate_object(DeviceKind.GPU, {"spec": {**spec, "deployAs": "DRADriver"}}).allowed


# Every other kind: (kind, a field its driver has no use for, a value, a word of the reason).
OTHER_KINDS_UNUSED = [
    (DeviceKind.QAT, "preferredAllocationPolicy", "packed", "scheduler"),
    (DeviceKind.DSA, "sharedDevNum", 4, "allowMultipleAllocations"),
    (DeviceKind.DSA, "driver", "vfio-pci", "idxd"),
    (DeviceKind.IAA, "sharedDevNum", 2, "allowMultipleAllocations"),
    (DeviceKind.NPU, "sharedDevNum", 2, "whole NPU"),
    (DeviceKind.SGX, "enclaveLimit", 110, "EPC"),
    (DeviceKind.SGX, "provisionLimit", 110, "EPC"),
    (DeviceKind.SGX, "dcapInfraResources", True, "DCAP"),
]


@pytest.mark.parametrize(
    ("kind", "field", "value", "text"), OTHER_KINDS_UNUSED, ids=lambda v: getattr(v, "value", str(v))
)
def test_every_kinds_driver_rejects_its_plugin_only_fields(
    kind: DeviceKind, field: str, value: object, text: str
) -> None:
    verdict = validate_object(kind, {"spec": {**DRA, field: value}})
    assert not verdict.allowed
    assert f"spec.{field}: " in verdict.message and text in verdict.message, verdict.message
    # The same field is the device plugin's to use.
    plugin = validate_object(kind, {"spec": {"image": img(kind.value), field: value}})
    assert plugin.allowed, plugin.message


@pytest.mark.parametrize("kind", [k for k in DeviceKind if k is not DeviceKind.GPU], ids=lambda k: k.value)
def test_every_kinds_driver_needs_the_node_image(kind: DeviceKind) -> None:
    assert validate_object(kind, {"spec": DRA}).allowed
    verdict = validate_object(kind, {"spec": {**DRA, "image": img(kind.value)}})
    assert not verdict.allowed and f"intel_{kind.value}_dra_driver" in verdict.message, verdict.message


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        (DeviceKind.QAT, {"dpdkDriver": "vfio-pci", "kernelVfDrivers": ["4xxxvf"], "maxNumDevices": 8}),
        (DeviceKind.FPGA, {"mode": "region"}),
        (DeviceKind.DSA, {"sharedDevNum": 1, "driver": "idxd"}),
        (DeviceKind.DLB, {"nodeSelector": {"dlb": "yes"}}),
    ],
    ids=lambda v: getattr(v, "value", ""),
)
def test_every_kinds_driver_accepts_the_fields_it_uses(kind: DeviceKind, spec: dict[str, Any]) -> None:
    verdict = validate_object(kind, {"spec": {**DRA, **spec}})
    assert verdict.allowed, verdict.message
