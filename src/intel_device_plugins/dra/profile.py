"""What a device kind gives the DRA framework: a driver name, a scan and, optionally, claim edits.

The shape follows the device plugin framework's plugins (a scanner plus a few optional hooks): the
framework asks ``scan`` on start, on file-system and uevent notices under ``watch_paths`` /
``uevent_subsystems``, and periodically as a safety net; it publishes what changed, and prepares claims
from the latest inventory. A profile may also have the device-plugin framework's optional health hooks
(``deviceplugin.plugin``): ``monitor(changed)`` runs beside the scans and a change rescans at once,
``observe_uevent`` sees each uevent before its rescan, ``safety_rescan_interval`` rescans sooner.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Protocol

from intel_device_plugins.deviceplugin.model import CdiDevice
from intel_device_plugins.dra.model import AllocatedDevice, Device, Inventory


class ClaimPreparationError(ValueError):
    """A claim the driver cannot prepare; the message names the claim and the device."""


class DriverProfile(Protocol):
    """One DRA driver (one driver name, one pool per node)."""

    @property
    def driver_name(self) -> str:
        """The driver's name in the API (``gpu.intel.com``); also the attribute domain."""
        ...

    def scan(self) -> Inventory:
        """The node's devices now. Pure apart from reading the file system under the profile's root."""
        ...

    def watch_paths(self) -> Sequence[Path]:
        """Directories whose changes mean the inventory may have changed."""
        ...

    def uevent_subsystems(self) -> Collection[str]:
        """Kernel uevent subsystems whose events mean the inventory may have changed."""
        ...

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        """The CDI devices for one claim's devices of this driver, in allocation order, one per device.

        The default (:func:`default_claim_edits`) gives each device its own ``cdi`` edits; kinds whose
        containers need claim-wide state (QAT's ``QAT<n>`` numbering) compute them together here.
        Raise :class:`ClaimPreparationError` naming the device when one cannot be prepared.
        """
        ...


def claim_cdi_kind(driver_name: str) -> str:
    """The CDI kind a driver's per-claim specs use: ``k8s.gpu.intel.com/claim``."""
    return f"k8s.{driver_name}/claim"


def default_claim_edits(
    driver_name: str, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
) -> list[CdiDevice]:
    """Each allocated device's own CDI edits, renamed ``<claim uid>-<device>`` under the claim kind; an
    admin-access allocation gets the device's ``admin_cdi`` edits where it has them."""
    edits: list[CdiDevice] = []
    for result, device in allocated:
        cdi = device.admin_cdi if result.admin_access and device.admin_cdi is not None else device.cdi
        if cdi is None:
            raise ClaimPreparationError(
                f"device {result.device} of driver {driver_name} has no container edits"
            )
        edits.append(
            CdiDevice(
                kind=claim_cdi_kind(driver_name),
                name=f"{claim_uid}-{result.device}",
                nodes=cdi.nodes,
                mounts=cdi.mounts,
                mount_type=cdi.mount_type,
                mount_options=cdi.mount_options,
                create_runtime_hooks=cdi.create_runtime_hooks,
                env=cdi.env,
            )
        )
    return edits
