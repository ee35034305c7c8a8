"""The eight device kinds of ``deviceplugin.intel.com/v1`` and the names derived from them."""

from __future__ import annotations

import enum
from typing import Final

GROUP: Final = "deviceplugin.intel.com"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"


class DeviceKind(enum.Enum):
    """Short device key as used by ``--devices`` and in every derived name."""

    DLB = "dlb"
    DSA = "dsa"
    FPGA = "fpga"
    GPU = "gpu"
    IAA = "iaa"
    NPU = "npu"
    QAT = "qat"
    SGX = "sgx"

    @property
    def kind(self) -> str:
        """CR kind, e.g. ``GpuDevicePlugin``."""
        return f"{self.value.capitalize()}DevicePlugin"

    @property
    def plural(self) -> str:
        """Resource plural, e.g. ``gpudeviceplugins``."""
        return f"{self.value}deviceplugins"

    @property
    def singular(self) -> str:
        return f"{self.value}deviceplugin"

    @property
    def daemonset_base(self) -> str:
        """DaemonSet name prefix and ``app`` label value, e.g. ``intel-gpu-plugin``."""
        return f"intel-{self.value}-plugin"

    @property
    def dra_driver_base(self) -> str:
        """Container name of the kind's DRA driver and name of its standalone DaemonSet, e.g.
        ``intel-gpu-dra-driver``."""
        return f"intel-{self.value}-dra-driver"

    def daemonset_name(self, cr_name: str) -> str:
        """Name of the DaemonSet owned by CR ``cr_name`` (upstream's naming, so existing ones are adopted)."""
        return f"{self.daemonset_base}-{cr_name}"

    @property
    def mutate_path(self) -> str:
        return f"/mutate-deviceplugin-intel-com-v1-{self.singular}"

    @property
    def validate_path(self) -> str:
        return f"/validate-deviceplugin-intel-com-v1-{self.singular}"

    @classmethod
    def from_kind(cls, kind: str) -> DeviceKind:
        """Look a kind up by its CR kind name; raises KeyError for anything else."""
        for k in cls:
            if k.kind == kind:
                return k
        raise KeyError(kind)


ALL_KINDS: Final = tuple(DeviceKind)
