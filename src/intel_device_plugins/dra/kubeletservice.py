"""The gRPC services the kubelet calls on a DRA driver's socket: claim preparation and device health.

``v1.DRAPlugin``: the kubelet sends the claims of a pod in one call; each is prepared on its own and
answered with its CDI IDs or its error, because the kubelet fails only the claims with an error and
calls again for them. A claim already in the checkpoint (with its spec file still there) is answered
from it without reading the API server, so a repeated prepare (kubelet restart, retry) gives the same
answer and costs one ``stat``. The others are read from the API server a few at a time
(``MAX_CONCURRENT_READS``) and each prepared as it arrives: a pod may name hundreds of claims, and the
driver must not hold them all, nor a connection each, at once. Unprepare removes the claim's spec file
and its checkpoint entry; an unknown claim is already unprepared.

``DRAResourceHealth`` (``v1`` and ``v1alpha1``, the same stream): the full health state on open, again
whenever it changes, and every ``health_resend_interval`` seconds. The kubelet (1.36 and 1.37,
``pkg/kubelet/cm/dra/healthinfo.go``) shows a device as ``Unknown`` once its report is older than the
report's own ``health_check_timeout_seconds`` (30 s when unset), and forgets the whole driver when the
stream ends. So the timeout guards only against a driver that is alive but stuck: each report says
``HEALTH_CHECK_TIMEOUT`` and is repeated every third of it, rather than every 10 s against the
default, which cost the idle driver six wake-ups a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from intel_device_plugins.deviceplugin.cdi import CdiWriteError, write_cdi_document
from intel_device_plugins.dra.checkpoint import Checkpoint, CheckpointError
from intel_device_plugins.dra.claims import ClaimError, allocated_devices, check_claim_uid
from intel_device_plugins.dra.model import ClaimRef, HealthState, Inventory, PreparedClaim
from intel_device_plugins.dra.parameters import parameter_kinds_of
from intel_device_plugins.dra.prepare import files_to_remove, plan_prepare
from intel_device_plugins.dra.profile import ClaimPreparationError, DriverProfile
from intel_device_plugins.kubeletapi import dra_health_v1, dra_health_v1alpha1, dra_v1
from intel_device_plugins.kubeletapi.rpc import Handlers, server_stream, unary

log = logging.getLogger(__name__)

HEALTH_CHECK_TIMEOUT = 300
"""Seconds the kubelet keeps a reported health before showing ``Unknown`` (sent in every report). Also
how long a device that left the inventory keeps its last health there (it is simply not reported any
more), so it is minutes, not hours: what a stuck driver or a removed device may leave stale."""
HEALTH_RESEND_INTERVAL = HEALTH_CHECK_TIMEOUT / 3
"""Seconds between repeated full health reports: a third of the timeout, so one late or lost report
never lets a device go ``Unknown``."""
MAX_HEALTH_MESSAGE = 1024
"""The kubelet truncates longer messages; trimming here keeps the stream's messages small."""
MAX_CLAIMS_PER_CALL = 1024
"""A pod has at most a few hundred claims; a bound on what one call makes the driver read."""
MAX_CONCURRENT_READS = 4
"""Claims of one call read from the API server at once (the REST client's connection bound)."""

GetClaim = Callable[[str, str], Awaitable[Mapping[str, Any]]]
"""``await get_claim(namespace, name)``: the ResourceClaim as the API server returns it."""


DRA_SERVICE = dra_v1.DRAPlugin.NAME
HEALTH_SERVICES = (dra_health_v1.DRAResourceHealth.NAME, dra_health_v1alpha1.DRAResourceHealth.NAME)
"""The health stream in both packages, for 1.37 and 1.36 kubelets (the messages are identical)."""


def health_report(inventory: Inventory) -> tuple[tuple[str, HealthState, str], ...]:
    """(device, health, message) for every device, sorted by name: what the stream reports."""
    return tuple(
        sorted(
            (
                device.name,
                device.reported_health,
                device.health_message[:MAX_HEALTH_MESSAGE],
            )
            for device in inventory.devices
        )
    )


HEALTH_CODES = {
    HealthState.UNKNOWN: dra_health_v1.HealthStatus.UNKNOWN,
    HealthState.HEALTHY: dra_health_v1.HealthStatus.HEALTHY,
    HealthState.UNHEALTHY: dra_health_v1.HealthStatus.UNHEALTHY,
}


def health_response(
    pool: str, devices: Sequence[tuple[str, HealthState, str]], now: int, timeout_seconds: int = 0
) -> dra_health_v1.NodeWatchResourcesResponse:
    """Every device's health at ``now``, each valid for ``timeout_seconds``
    (``health_check_timeout_seconds``; 0 leaves the kubelet's 30 s)."""
    return dra_health_v1.NodeWatchResourcesResponse(
        devices=tuple(
            dra_health_v1.DeviceHealth(
                device=dra_health_v1.DeviceIdentifier(pool_name=pool, device_name=name),
                health=HEALTH_CODES[state],
                last_updated_time=now,
                health_check_timeout_seconds=timeout_seconds,
                message=message,
            )
            for name, state, message in devices
        )
    )


def _claim_error_text(error: BaseException) -> str:
    if isinstance(error, (ClaimError, ClaimPreparationError, CheckpointError, CdiWriteError)):
        return str(error)
    return f"{type(error).__name__}: {error}"


class KubeletService:
    """Serves ``v1.DRAPlugin`` and ``DRAResourceHealth`` for one driver (``handlers()`` for a server)."""

    def __init__(
        self,
        profile: DriverProfile,
        inventory: Callable[[], Inventory],
        get_claim: GetClaim,
        node_name: str,
        checkpoint: Checkpoint,
        cdi_dir: Path,
        *,
        health_resend_interval: float = HEALTH_RESEND_INTERVAL,
    ) -> None:
        self.profile = profile
        self.driver = profile.driver_name
        self._inventory = inventory
        self._get_claim = get_claim
        self.node_name = node_name
        self.checkpoint = checkpoint
        self.cdi_dir = cdi_dir
        self._resend = health_resend_interval
        self._health = health_report(inventory())
        self._health_changed = asyncio.Event()

    # ----- preparation ---------------------------------------------------------------------------

    def _still_prepared(self, uid: str) -> PreparedClaim | None:
        prepared = self.checkpoint.load().get(uid)
        if prepared is None:
            return None
        if all(os.path.exists(self.cdi_dir / name) for name in prepared.cdi_spec_files):
            return prepared
        return None  # a spec file vanished: prepare again, which rewrites it

    def _prepare_one(self, ref: ClaimRef, claim: Mapping[str, Any]) -> PreparedClaim:
        kinds = parameter_kinds_of(self.profile)
        allocated = allocated_devices(claim, ref, self.driver, self.node_name, kinds)
        plan = plan_prepare(self.profile, ref, allocated, self._inventory())
        if plan.spec_file is None:
            return plan.prepared  # no device of this driver: nothing to undo, so no record to keep

        def record(claims: dict[str, PreparedClaim]) -> None:
            claims[ref.uid] = plan.prepared

        # The checkpoint names the spec file before it exists, so no crash leaves a file nobody removes.
        self.checkpoint.update(record)
        if plan.spec_file is not None and plan.spec is not None:
            try:
                write_cdi_document(self.cdi_dir, plan.spec_file, plan.spec)
            except CdiWriteError:

                def forget(claims: dict[str, PreparedClaim]) -> None:
                    claims.pop(ref.uid, None)

                with contextlib.suppress(CheckpointError):
                    self.checkpoint.update(forget)
                raise
        return plan.prepared

    async def _read_and_prepare(self, ref: ClaimRef) -> PreparedClaim | BaseException:
        try:
            claim = await self._get_claim(ref.namespace, ref.name)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return ClaimError(
                f"cannot read ResourceClaim {ref.namespace}/{ref.name}: {_claim_error_text(error)}"
            )
        try:
            return self._prepare_one(ref, claim)
        except Exception as error:
            return error

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PreparedClaim | BaseException]:
        """Each claim's prepared state or the error that stopped it, keyed by claim UID."""
        outcomes: dict[str, PreparedClaim | BaseException] = {}
        missing: list[ClaimRef] = []
        for ref in refs:
            try:
                check_claim_uid(ref.uid)
                prepared = self._still_prepared(ref.uid)
            except (ClaimError, CheckpointError) as error:
                outcomes[ref.uid] = error
                continue
            if prepared is None:
                missing.append(ref)
            else:
                outcomes[ref.uid] = prepared
        # A few reads at a time, each claim prepared as soon as it arrives: a pod may name hundreds of
        # claims, and reading them all at once held every answer and a connection each. Preparing
        # awaits nothing, so no other prepare runs between a checkpoint read and its write.
        pending = iter(missing)

        async def worker() -> None:
            for ref in pending:
                outcomes[ref.uid] = await self._read_and_prepare(ref)

        await asyncio.gather(*(worker() for _ in range(min(MAX_CONCURRENT_READS, len(missing)))))
        for uid, outcome in outcomes.items():
            if isinstance(outcome, BaseException):
                log.warning("prepare of claim %s failed: %s", uid, _claim_error_text(outcome))
        return outcomes

    def _unprepare_one(self, ref: ClaimRef) -> None:
        check_claim_uid(ref.uid)
        removed: list[PreparedClaim] = []

        def drop(claims: dict[str, PreparedClaim]) -> None:
            if ref.uid in claims:
                removed.append(claims.pop(ref.uid))

        try:
            self.checkpoint.update(drop)
        except CheckpointError as error:
            # The devices are given back all the same: a record left behind is dropped when its spec
            # file is found gone (at start, or by a repeated prepare), and the kubelet would retry
            # this unprepare, holding up the pod's deletion, until the disk is fixed.
            log.warning("unprepare of claim %s: its spec files are removed, but %s", ref.uid, error)
        for name in files_to_remove(self.driver, ref.uid, removed[0] if removed else None):
            try:
                (self.cdi_dir / name).unlink(missing_ok=True)
            except OSError as error:
                raise ClaimPreparationError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: cannot remove CDI spec "
                    f"{self.cdi_dir / name}: {error.strerror}"
                ) from error

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, BaseException | None]:
        """Remove each claim's spec file and checkpoint entry; the error per claim UID, if any."""
        outcomes: dict[str, BaseException | None] = {}
        for ref in refs:
            try:
                self._unprepare_one(ref)
                outcomes[ref.uid] = None
            except (ClaimError, ClaimPreparationError, CheckpointError) as error:
                log.warning("unprepare of claim %s failed: %s", ref.uid, error)
                outcomes[ref.uid] = error
        return outcomes

    # ----- gRPC: v1.DRAPlugin --------------------------------------------------------------------
    # Messages are the generated codecs of kubeletapi: protobuf's runtime is not loaded.

    @staticmethod
    def _refs(claims: Sequence[dra_v1.Claim]) -> list[ClaimRef]:
        if len(claims) > MAX_CLAIMS_PER_CALL:
            raise GRPCError(
                Status.INVALID_ARGUMENT, f"{len(claims)} claims in one call, over {MAX_CLAIMS_PER_CALL}"
            )
        return [ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name) for claim in claims]

    async def NodePrepareResources(
        self, request: dra_v1.NodePrepareResourcesRequest
    ) -> dra_v1.NodePrepareResourcesResponse:
        refs = self._refs(request.claims)
        answers: dict[str, dra_v1.NodePrepareResourceResponse] = {}
        for uid, outcome in (await self.prepare(refs)).items():
            if isinstance(outcome, BaseException):
                answers[uid] = dra_v1.NodePrepareResourceResponse(error=_claim_error_text(outcome))
                continue
            answers[uid] = dra_v1.NodePrepareResourceResponse(
                devices=tuple(
                    dra_v1.Device(
                        request_names=tuple(device.requests),
                        pool_name=device.pool,
                        device_name=device.device,
                        cdi_device_ids=tuple(device.cdi_device_ids),
                        share_id=device.share_id,
                    )
                    for device in outcome.devices
                )
            )
        return dra_v1.NodePrepareResourcesResponse(claims=answers)

    async def NodeUnprepareResources(
        self, request: dra_v1.NodeUnprepareResourcesRequest
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        refs = self._refs(request.claims)
        outcomes = self.unprepare(refs).items()
        return dra_v1.NodeUnprepareResourcesResponse(
            claims={
                uid: dra_v1.NodeUnprepareResourceResponse(
                    error="" if outcome is None else _claim_error_text(outcome)
                )
                for uid, outcome in outcomes
            }
        )

    # ----- health --------------------------------------------------------------------------------

    def inventory_changed(self, inventory: Inventory) -> None:
        """Tell open health streams about ``inventory`` when its health differs from the last report.

        Call it on the event loop's thread (the streams wait on an ``asyncio.Event``).
        """
        report = health_report(inventory)
        if report == self._health:
            return
        self._health = report
        changed, self._health_changed = self._health_changed, asyncio.Event()
        changed.set()

    def _health_message(self) -> dra_health_v1.NodeWatchResourcesResponse:
        return health_response(self.node_name, self._health, int(time.time()), HEALTH_CHECK_TIMEOUT)

    async def health_stream(self) -> AsyncIterator[dra_health_v1.NodeWatchResourcesResponse]:
        """The stream's messages: now, on every change, and periodically."""
        while True:
            changed = self._health_changed
            yield self._health_message()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self._resend)

    def _watch(
        self, request: dra_health_v1.NodeWatchResourcesRequest
    ) -> AsyncIterator[dra_health_v1.NodeWatchResourcesResponse]:
        return self.health_stream()

    async def _watch_v1alpha1(
        self, request: dra_health_v1alpha1.NodeWatchResourcesRequest
    ) -> AsyncIterator[dra_health_v1alpha1.NodeWatchResourcesResponse]:
        """The same stream in v1alpha1's classes (the same bytes: the two versions' messages agree)."""
        async for message in self.health_stream():
            yield dra_health_v1alpha1.NodeWatchResourcesResponse.decode(message.encode())

    def handlers(self) -> Handlers:
        """``v1.DRAPlugin``, ``v1.DRAResourceHealth`` and ``v1alpha1.DRAResourceHealth`` for a server."""
        return dict(
            [
                unary(dra_v1.DRAPlugin.NodePrepareResources, self.NodePrepareResources),
                unary(dra_v1.DRAPlugin.NodeUnprepareResources, self.NodeUnprepareResources),
                server_stream(dra_health_v1.DRAResourceHealth.NodeWatchResources, self._watch),
                server_stream(dra_health_v1alpha1.DRAResourceHealth.NodeWatchResources, self._watch_v1alpha1),
            ]
        )
