"""The registry of device kinds: each kind's profile, found by kind or by spec."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from intel_device_plugins.operator.kinds import DeviceKind, dlb, dsa, fpga, gpu, iaa, npu, qat, sgx
from intel_device_plugins.operator.kinds.dlb import DlbSpec
from intel_device_plugins.operator.kinds.dsa import DsaSpec
from intel_device_plugins.operator.kinds.fpga import FpgaSpec
from intel_device_plugins.operator.kinds.gpu import GpuSpec
from intel_device_plugins.operator.kinds.iaa import IaaSpec
from intel_device_plugins.operator.kinds.npu import NpuSpec
from intel_device_plugins.operator.kinds.qat import QatSpec
from intel_device_plugins.operator.kinds.sgx import SgxSpec
from intel_device_plugins.operator.profile import KindProfile
from intel_device_plugins.operator.spec import CommonSpec

AnySpec = DlbSpec | DsaSpec | FpgaSpec | GpuSpec | IaaSpec | NpuSpec | QatSpec | SgxSpec

PROFILES: Final[Mapping[DeviceKind, KindProfile[Any]]] = MappingProxyType(
    {
        p.kind: p
        for p in (
            dlb.PROFILE,
            dsa.PROFILE,
            fpga.PROFILE,
            gpu.PROFILE,
            iaa.PROFILE,
            npu.PROFILE,
            qat.PROFILE,
            sgx.PROFILE,
        )
    }
)

SPEC_CLASSES: Final[Mapping[DeviceKind, type[CommonSpec]]] = MappingProxyType(
    {kind: profile.spec_class for kind, profile in PROFILES.items()}
)


def profile_of(spec: CommonSpec) -> KindProfile[Any]:
    return PROFILES[spec.KIND]
