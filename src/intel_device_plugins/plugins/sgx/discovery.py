"""SGX enclave and provisioning devices of the in-kernel driver, and the DCAP infrastructure resources.

SGX is not a countable device: every container that runs enclaves needs ``/dev/sgx_enclave``, and
quoting enclaves also ``/dev/sgx_provision``. The plugin advertises each as a resource with a fixed
number of IDs, the limit of containers per node that may use it (by default as many as pods fit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from intel_device_plugins.deviceplugin.cdi import VENDOR_KIND_PREFIX
from intel_device_plugins.deviceplugin.model import (
    CdiDevice,
    DeviceInfo,
    DeviceNode,
    DeviceTree,
    Discovery,
    Mount,
)
from intel_device_plugins.sysfs import prefixed

NAMESPACE = "sgx.intel.com"
ENCLAVE_NODE = "/dev/sgx_enclave"
PROVISION_NODE = "/dev/sgx_provision"
DEFAULT_PODS = 110
"""The kubelet's default ``maxPods``, used when ``PODS_PER_CORE`` is unset or not a number."""
SGX_CDI_KIND = f"{VENDOR_KIND_PREFIX}/sgx"


def pod_count(pods_per_core: str | None, cpus: int) -> int:
    """Default limit of both resources: ``PODS_PER_CORE`` times CPUs, or 110 without a usable value."""
    if pods_per_core is None:
        return DEFAULT_PODS
    try:
        per_core = int(pods_per_core.strip())
    except ValueError:
        return DEFAULT_PODS
    if per_core < 1 or cpus < 1:
        return DEFAULT_PODS
    return per_core * cpus


@dataclass(frozen=True)
class SgxLimits:
    """How many containers may use each resource, and whether the DCAP resources exist."""

    enclave: int
    provision: int
    dcap_infra: bool = False


def efivarfs_cdi_device() -> CdiDevice:
    """The CDI device that gives the DCAP registration service the EFI variables it reads."""
    return CdiDevice(
        kind=SGX_CDI_KIND,
        name="efivarfs",
        mounts=(Mount("efivarfs", "/run/efivars", read_only=False),),
        mount_type="efivarfs",
        mount_options=("rw", "nosuid", "nodev", "noexec", "relatime"),
    )


def sgx_tree(prefix: str, limits: SgxLimits, present: bool) -> DeviceTree:
    """The device tree for given limits; every resource has zero devices when SGX is not present.

    All IDs of one resource share a single :class:`DeviceInfo` object, which keeps a tree of
    thousands of IDs cheap to build and to compare.
    """
    enclave_path, provision_path = prefix + ENCLAVE_NODE, prefix + PROVISION_NODE
    enclave = DeviceNode(enclave_path, enclave_path, "rw")
    provision = DeviceNode(provision_path, provision_path, "rw")
    resources: dict[str, Mapping[str, DeviceInfo]] = {"enclave": {}, "provision": {}}
    if limits.dcap_infra:
        resources.update({"qe": {}, "registration": {}})
    if not present:
        return resources
    enclave_info = DeviceInfo(nodes=(enclave,))
    provision_info = DeviceInfo(nodes=(provision,))
    resources["enclave"] = dict.fromkeys((f"sgx-enclave-{i}" for i in range(limits.enclave)), enclave_info)
    resources["provision"] = dict.fromkeys(
        (f"sgx-provision-{i}" for i in range(limits.provision)), provision_info
    )
    if limits.dcap_infra:
        resources["qe"] = {"qe-1": DeviceInfo(nodes=(enclave, provision))}
        resources["registration"] = {
            "registration-1": DeviceInfo(nodes=(enclave, provision), cdi=efivarfs_cdi_device())
        }
    return resources


def sgx_present(prefix: str) -> tuple[bool, tuple[str, ...]]:
    """Both driver nodes exist; otherwise the problem names the missing one(s)."""
    missing = [
        str(prefixed(prefix, node))
        for node in (ENCLAVE_NODE, PROVISION_NODE)
        if not prefixed(prefix, node).exists()
    ]
    if missing:
        return False, (f"SGX device node(s) {', '.join(missing)} not found; advertising no SGX devices",)
    return True, ()


def scan_sgx(prefix: str, limits: SgxLimits) -> Discovery:
    present, problems = sgx_present(prefix)
    return Discovery(sgx_tree(prefix, limits, present), problems)
