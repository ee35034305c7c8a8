"""SGX as a DRA driver (``sgx.intel.com``): the enclave device with the node's EPC as consumable capacity.

Every enclave-running container needs ``/dev/sgx_enclave``, so the enclave device is one device that
any number of claims may hold (``allowMultipleAllocations``); what is scarce is EPC, published as its
capacity ``epc``. A claim asks ``capacity.requests: {epc: 512Mi}`` and the scheduler keeps the sum of
all claims within the node's EPC, which ``sgx.intel.com/epc`` as an extended resource only
approximates. Requests round up to whole EPC pages (4 KiB); a claim that names no amount takes none.
The provisioning device (quote generation) is a separate shareable device, as the plugin keeps it a
separate resource.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import AllocatedDevice, Capacity, Device, Inventory, RequestPolicy
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.plugins.sgx.discovery import ENCLAVE_NODE, NAMESPACE, PROVISION_NODE, sgx_present
from intel_device_plugins.plugins.sgx.epchook import binary_si, epc_size
from intel_device_plugins.sysfs import prefixed

EPC_CAPACITY = "epc"
EPC_PAGE = "4Ki"


def sgx_devices(prefix: str, epc_bytes: int) -> tuple[Device, ...]:
    """The enclave device (with ``epc_bytes`` of EPC) and the provisioning device."""
    enclave_path, provision_path = prefix + ENCLAVE_NODE, prefix + PROVISION_NODE
    enclave = Device(
        name="enclave",
        attributes={"type": "enclave"},
        capacity={
            EPC_CAPACITY: Capacity(
                binary_si(epc_bytes),
                RequestPolicy(default="0", valid_range_min="0", valid_range_step=EPC_PAGE),
            )
        },
        cdi=CdiDevice(
            kind=f"{NAMESPACE}/sgx", name="enclave", nodes=(DeviceNode(enclave_path, enclave_path),)
        ),
        allow_multiple_allocations=True,
    )
    provision = Device(
        name="provision",
        attributes={"type": "provision"},
        # No EPC of its own, but a selector or request naming ``epc`` must not fail on it (dra.uniform).
        capacity={EPC_CAPACITY: Capacity("0")},
        cdi=CdiDevice(
            kind=f"{NAMESPACE}/sgx", name="provision", nodes=(DeviceNode(provision_path, provision_path),)
        ),
        allow_multiple_allocations=True,
    )
    return (enclave, provision)


def scan_sgx_devices(prefix: str) -> Inventory:
    """Both devices when the driver's nodes exist and the node has EPC; none otherwise, with the reason."""
    present, problems = sgx_present(prefix)
    if not present:
        return Inventory(problems=problems)
    epc, source = epc_size(prefix)
    if epc <= 0:
        return Inventory(
            problems=(f"SGX device nodes exist but the EPC size is unknown (read from {source})",)
        )
    return Inventory(devices=sgx_devices(prefix, epc))


SGX_DEVICE_CLASSES = (
    DeviceClassSpec("sgx.intel.com", NAMESPACE),
    DeviceClassSpec(
        "enclave.sgx.intel.com",
        NAMESPACE,
        selector='device.attributes["sgx.intel.com"].type == "enclave"',
        extended_resource_name="sgx.intel.com/enclave",
    ),
    DeviceClassSpec(
        "provision.sgx.intel.com",
        NAMESPACE,
        selector='device.attributes["sgx.intel.com"].type == "provision"',
        extended_resource_name="sgx.intel.com/provision",
    ),
)
"""``sgx.intel.com/epc`` has no class: an extended resource counts devices, EPC is an amount."""


@dataclass
class SgxDriverProfile:
    prefix: str = ""

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        return scan_sgx_devices(self.prefix)

    def watch_paths(self) -> Sequence[Path]:
        return (prefixed(self.prefix, "/dev"),)

    def uevent_subsystems(self) -> Collection[str]:
        return ("misc",)

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)
