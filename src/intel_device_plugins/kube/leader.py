"""Leader election on a ``coordination.k8s.io/v1`` Lease, so only one replica reconciles.

Every controller of this project elects its leader here, without extra CRDs. The decision
is a pure function; expiry is judged by the local monotonic clock from the moment the record was last seen
to change, which makes it immune to clock skew between replicas. Defaults give failover within 12 s of a
crashed leader (10 s lease + 2 s retry) and immediate hand-over when a leader shuts down cleanly.
A leader renews by replacing the Lease it last wrote, without reading it first (as client-go does); only
a conflict sends it back to reading and deciding.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import enum
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from intel_device_plugins.kube.apierrors import is_status

LEASE_NAME: Final = "d1c7b6d5.intel.com"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The parts of the Lease spec that election looks at."""

    holder: str
    duration_s: int
    transitions: int = 0


class Action(enum.Enum):
    CREATE = "create"
    RENEW = "renew"
    TAKE_OVER = "take-over"
    WAIT = "wait"


def decide(record: LeaseRecord | None, me: str, observed_at: float, now: float, duration_s: int) -> Action:
    """What to do with the Lease. ``observed_at`` is when (monotonic) ``record`` was last seen to change."""
    if record is None:
        return Action.CREATE
    if record.holder == me:
        return Action.RENEW
    if not record.holder or observed_at + record.duration_s <= now:
        return Action.TAKE_OVER
    return Action.WAIT


@dataclasses.dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    identity: str
    name: str = LEASE_NAME
    lease_duration_s: int = 10
    renew_deadline_s: float = 8.0
    retry_period_s: float = 2.0


def _record(lease: Lease) -> LeaseRecord:
    spec = lease.spec or LeaseSpec()
    return LeaseRecord(spec.holderIdentity or "", spec.leaseDurationSeconds or 0, spec.leaseTransitions or 0)


class LeaderElector:
    """Campaigns for the Lease and runs ``lead`` while holding it; returns when leadership is lost."""

    def __init__(
        self, client: AsyncClient, config: ElectionConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._cfg = config
        self._clock = clock
        self._seen: tuple[LeaseRecord | None, str] = (None, "")
        self._observed_at = clock()
        # The Lease as this replica last wrote it while leading: the next renewal replaces it directly (its
        # resourceVersion makes any write by someone else since a 409), one request instead of two.
        self._written: Lease | None = None
        self.is_leader = False
        self.lost = False

    def _observe(self, lease: Lease | None) -> LeaseRecord | None:
        rec = None if lease is None else _record(lease)
        stamp = (
            ""
            if lease is None or lease.spec is None or lease.spec.renewTime is None
            else str(lease.spec.renewTime)
        )
        if (rec, stamp) != self._seen:
            self._seen = (rec, stamp)
            self._observed_at = self._clock()
        return rec

    def _spec(self, transitions: int, acquire: dt.datetime | None) -> LeaseSpec:
        now = dt.datetime.now(dt.UTC)
        return LeaseSpec(
            holderIdentity=self._cfg.identity,
            leaseDurationSeconds=self._cfg.lease_duration_s,
            acquireTime=acquire or now,
            renewTime=now,
            leaseTransitions=transitions,
        )

    async def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True when this replica holds the Lease afterwards."""
        cfg = self._cfg
        written, self._written = self._written, None
        if written is not None and written.spec is not None:
            written.spec = self._spec(written.spec.leaseTransitions or 0, written.spec.acquireTime)
            try:
                self._written = await self._client.replace(written)
                return True
            except Exception as exc:
                if not is_status(exc, 404, 409):
                    raise
                # someone else wrote or deleted it since: read it and decide as usual
        try:
            lease: Lease | None = await self._client.get(Lease, cfg.name, namespace=cfg.namespace)
        except Exception as exc:
            if not is_status(exc, 404):
                raise
            lease = None
        rec = self._observe(lease)
        action = decide(rec, cfg.identity, self._observed_at, self._clock(), cfg.lease_duration_s)
        if action is Action.WAIT:
            return False
        try:
            if lease is None:
                self._written = await self._client.create(
                    Lease(
                        metadata=ObjectMeta(name=cfg.name, namespace=cfg.namespace), spec=self._spec(0, None)
                    )
                )
            else:
                assert rec is not None
                keep = lease.spec.acquireTime if action is Action.RENEW and lease.spec else None
                transitions = rec.transitions + (1 if action is Action.TAKE_OVER else 0)
                lease.spec = self._spec(transitions, keep)
                # carries resourceVersion: a racing writer gets 409
                self._written = await self._client.replace(lease)
        except Exception as exc:
            if is_status(exc, 409, 422):
                return False
            raise
        if action is not Action.RENEW:
            log.info("acquired lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        return True

    async def _step(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except Exception as exc:  # network errors and API restarts must not kill the campaign
            log.warning("lease round failed: %s", exc)
            return False

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign until leader, run ``lead`` while renewing; cancel it and return when renewal fails."""
        cfg = self._cfg
        while True:
            if await self._step():
                break
            await asyncio.sleep(cfg.retry_period_s)
        self.is_leader = True
        task = asyncio.create_task(lead())
        last_renew = self._clock()
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=cfg.retry_period_s)
                if done:
                    break
                if await self._step():
                    last_renew = self._clock()
                elif self._clock() - last_renew > cfg.renew_deadline_s:
                    log.error("lost lease %s/%s", cfg.namespace, cfg.name)
                    self.lost = True
                    break
        finally:
            self.is_leader = False
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await self.release()

    async def release(self) -> None:
        """Give the Lease up so another replica takes over at once (best effort)."""
        cfg = self._cfg
        self._written = None
        try:
            lease = await self._client.get(Lease, cfg.name, namespace=cfg.namespace)
            if lease.spec is None or lease.spec.holderIdentity != cfg.identity:
                return
            lease.spec.holderIdentity = ""
            lease.spec.leaseDurationSeconds = 1
            await self._client.replace(lease)
        except Exception as exc:
            log.warning("could not release lease: %s", exc)
