"""SGX: the spec, the DaemonSet template, the plugin arguments and the NFD hook init container."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Final

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.pod import (
    CDI,
    DRA_LIMITS,
    DRA_REQUESTS,
    PLUGIN_MEMORY_LIMIT,
    PLUGIN_MEMORY_REQUEST,
    SOCKETS,
    HostMount,
    KindTemplate,
    nfd_hook_init,
)
from intel_device_plugins.operator.profile import DraTemplate, InitParts, KindProfile, count_arg
from intel_device_plugins.operator.spec import (
    BOOL,
    POS_INT,
    FieldError,
    InitImageSpec,
    deploy_as_field,
    spec_field,
)
from intel_device_plugins.plugins.flagnames import (
    SGX_DCAP_INFRA_RESOURCES,
    SGX_ENCLAVE_LIMIT,
    SGX_PROVISION_LIMIT,
    flag,
)


@dataclasses.dataclass(frozen=True)
class SgxSpec(InitImageSpec):
    KIND: ClassVar[DeviceKind] = DeviceKind.SGX

    enclave_limit: int = spec_field(
        "enclaveLimit", POS_INT, "Containers per node that may use an enclave.", 0
    )
    provision_limit: int = spec_field(
        "provisionLimit", POS_INT, "Containers per node that may use the provisioning device.", 0
    )
    dcap_infra_resources: bool = spec_field(
        "dcapInfraResources", BOOL, "Deprecated: register DCAP infrastructure resources.", False
    )
    deploy_as: str = deploy_as_field()


TEMPLATE: Final = KindTemplate(
    (
        SOCKETS,
        HostMount("sgx-enclave", "/dev/sgx_enclave", "/dev/sgx_enclave", True, "CharDevice"),
        HostMount("sgx-provision", "/dev/sgx_provision", "/dev/sgx_provision", True, "CharDevice"),
        CDI,
    ),
    (PLUGIN_MEMORY_REQUEST, "40m"),
    (PLUGIN_MEMORY_LIMIT, "100m"),
    False,
    node_name_env=False,
)


def plugin_args(spec: SgxSpec) -> list[str]:
    args = [
        flag(SGX_ENCLAVE_LIMIT),
        count_arg(spec.enclave_limit, 1),
        flag(SGX_PROVISION_LIMIT),
        count_arg(spec.provision_limit, 1),
    ]
    if spec.dcap_infra_resources:
        args.append(flag(SGX_DCAP_INFRA_RESOURCES))
    return args


def init_parts(spec: SgxSpec) -> InitParts:
    if not spec.init_image:
        return [], []
    container, volume = nfd_hook_init(spec.init_image, "intel-sgx-initcontainer", "nfd-features")
    return [container], [volume]


def dra_unused_fields(spec: SgxSpec) -> list[FieldError]:
    """The limits count containers per node, which claims replace: the scheduler keeps the node's EPC as a
    capacity the claims request."""
    why = "means nothing for deployAs DRADriver"
    errors = [
        FieldError(path, f"{why}: claims share the device and request EPC as a capacity (docs/dra.md)")
        for path, value in (
            ("spec.enclaveLimit", spec.enclave_limit),
            ("spec.provisionLimit", spec.provision_limit),
        )
        if value
    ]
    if spec.dcap_infra_resources:
        errors.append(FieldError("spec.dcapInfraResources", f"{why}: the driver registers no DCAP resources"))
    return errors


DRA: Final = DraTemplate[SgxSpec](requests=DRA_REQUESTS, limits=DRA_LIMITS, unused_fields=dra_unused_fields)

PROFILE: Final = KindProfile(SgxSpec, TEMPLATE, plugin_args, init_parts, reinvoke_defaulting=True, dra=DRA)
