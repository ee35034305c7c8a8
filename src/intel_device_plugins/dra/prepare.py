"""The pure core of NodePrepareResources and NodeUnprepareResources for one claim.

Prepare turns a claim's allocated devices (:mod:`claims`) and the latest inventory into one CDI spec
document for the claim and the :class:`PreparedClaim` the checkpoint keeps and the kubelet is answered
from. The spec file's name is a function of the driver and the claim UID alone, so unprepare knows it
even when no checkpoint entry survived.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from intel_device_plugins.deviceplugin.cdi import cdi_spec_document_for
from intel_device_plugins.deviceplugin.model import CdiDevice, Health
from intel_device_plugins.dra.claims import check_claim_uid
from intel_device_plugins.dra.model import (
    AllocatedDevice,
    ClaimRef,
    Device,
    Inventory,
    PreparedClaim,
    PreparedDevice,
)
from intel_device_plugins.dra.profile import ClaimPreparationError, DriverProfile, claim_cdi_kind


def spec_file_name(driver: str, claim_uid: str) -> str:
    """``k8s.gpu.intel.com-claim_<uid>.json``: the claim's one CDI spec file."""
    return f"{claim_cdi_kind(driver).replace('/', '-')}_{check_claim_uid(claim_uid)}.json"


@dataclass(frozen=True)
class ClaimPlan:
    """What preparing one claim writes (``spec_file`` with ``spec``; no file for a claim with no device
    of this driver) and what it answers."""

    prepared: PreparedClaim
    spec_file: str | None
    spec: dict[str, Any] | None


def _resolve(
    driver: str, ref: ClaimRef, allocated: Sequence[AllocatedDevice], inventory: Inventory
) -> list[tuple[AllocatedDevice, Device]]:
    devices = inventory.for_claims()
    resolved: list[tuple[AllocatedDevice, Device]] = []
    for result in allocated:
        device = devices.get(result.device)
        if device is None:
            raise ClaimPreparationError(
                f"ResourceClaim {ref.namespace}/{ref.name}: device {result.device} of driver {driver} "
                "is not on this node any more"
            )
        # An admin-access claim (monitoring) may look at a sick device; a workload may not use one.
        if device.health is not Health.HEALTHY and not result.admin_access:
            reason = f": {device.health_message}" if device.health_message else ""
            raise ClaimPreparationError(
                f"ResourceClaim {ref.namespace}/{ref.name}: device {result.device} of driver {driver} "
                f"is unhealthy{reason}"
            )
        resolved.append((result, device))
    return resolved


def plan_prepare(
    profile: DriverProfile, ref: ClaimRef, allocated: Sequence[AllocatedDevice], inventory: Inventory
) -> ClaimPlan:
    """Prepare ``allocated`` (this driver's results of claim ``ref``) against ``inventory``.

    A device allocated to several requests of the claim (shares of one device) gets one CDI device;
    each result still gets its own answer entry. Raises :class:`ClaimPreparationError` naming the claim
    and the device when one is missing or unhealthy, or when the profile's edits do not fit.
    """
    driver = profile.driver_name
    kind = claim_cdi_kind(driver)
    resolved = _resolve(driver, ref, allocated, inventory)
    unique: dict[str, tuple[AllocatedDevice, Device]] = {}
    for result, device in resolved:
        unique.setdefault(result.device, (result, device))
    edits: Sequence[CdiDevice] = profile.claim_edits(ref.uid, list(unique.values())) if unique else ()
    if len(edits) != len(unique):
        raise ClaimPreparationError(
            f"ResourceClaim {ref.namespace}/{ref.name}: driver {driver} gave {len(edits)} CDI devices "
            f"for {len(unique)} devices"
        )
    cdi_ids: dict[str, str] = {}
    for name, edit in zip(unique, edits, strict=True):
        if edit.kind != kind:
            raise ClaimPreparationError(
                f"ResourceClaim {ref.namespace}/{ref.name}: CDI device for {name} has kind {edit.kind}, "
                f"not {kind}"
            )
        cdi_ids[name] = edit.qualified_name
    if len(set(cdi_ids.values())) != len(cdi_ids):
        raise ClaimPreparationError(
            f"ResourceClaim {ref.namespace}/{ref.name}: driver {driver} gave two devices one CDI name"
        )
    prepared_devices = tuple(
        PreparedDevice(
            requests=(result.request,),
            pool=result.pool,
            device=result.device,
            cdi_device_ids=(cdi_ids[result.device],),
            share_id=result.share_id,
        )
        for result, _ in resolved
    )
    spec_file = spec_file_name(driver, ref.uid) if edits else None
    return ClaimPlan(
        prepared=PreparedClaim(
            claim=ref, devices=prepared_devices, cdi_spec_files=(spec_file,) if spec_file else ()
        ),
        spec_file=spec_file,
        spec=cdi_spec_document_for(edits) if edits else None,
    )


def files_to_remove(driver: str, claim_uid: str, prepared: PreparedClaim | None) -> tuple[str, ...]:
    """The spec files unpreparing a claim removes: those the checkpoint recorded, and the claim's
    deterministic spec name in case the process that wrote it died before recording it."""
    names = dict.fromkeys(prepared.cdi_spec_files if prepared else ())
    names[spec_file_name(driver, claim_uid)] = None
    return tuple(names)
