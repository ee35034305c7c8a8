"""Lease-based leader election: the decision table and two electors racing over an in-memory Lease store."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import Status
from lightkube.resources.coordination_v1 import Lease

from intel_device_plugins.kube.leader import Action, ElectionConfig, LeaderElector, LeaseRecord, decide


@pytest.mark.parametrize(
    ("record", "observed", "now", "action"),
    [
        (None, 0.0, 0.0, Action.CREATE),
        (LeaseRecord("me", 10), 0.0, 100.0, Action.RENEW),
        (LeaseRecord("other", 10), 0.0, 5.0, Action.WAIT),
        (LeaseRecord("other", 10), 0.0, 10.0, Action.TAKE_OVER),
        (LeaseRecord("", 1), 0.0, 0.0, Action.TAKE_OVER),
    ],
)
def test_decide(record: LeaseRecord | None, observed: float, now: float, action: Action) -> None:
    assert decide(record, "me", observed, now, 10) is action


def _error(code: int) -> ApiError:
    return ApiError(status=Status(code=code, message=f"code {code}"))


class FakeLeases:
    """Just enough of AsyncClient for Leases, with resourceVersion conflicts like the API server."""

    def __init__(self) -> None:
        self.stored: Lease | None = None
        self.version = 0
        self.down = False
        self.gets = 0
        self.writes = 0

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("api server down")

    async def get(self, res: Any, name: str, *, namespace: str) -> Lease:
        self._check()
        self.gets += 1
        if self.stored is None:
            raise _error(404)
        return copy.deepcopy(self.stored)

    async def create(self, obj: Lease) -> Lease:
        self._check()
        if self.stored is not None:
            raise _error(409)
        self.version += 1
        assert obj.metadata is not None
        obj.metadata.resourceVersion = str(self.version)
        self.stored = copy.deepcopy(obj)
        return obj

    async def replace(self, obj: Lease) -> Lease:
        self._check()
        self.writes += 1
        assert self.stored is not None and self.stored.metadata is not None and obj.metadata is not None
        if obj.metadata.resourceVersion != self.stored.metadata.resourceVersion:
            raise _error(409)
        self.version += 1
        obj.metadata.resourceVersion = str(self.version)
        self.stored = copy.deepcopy(obj)
        return obj


def elector(store: FakeLeases, name: str) -> LeaderElector:
    cfg = ElectionConfig("ns", name, lease_duration_s=1, renew_deadline_s=0.6, retry_period_s=0.05)
    return LeaderElector(cast(AsyncClient, store), cfg)


async def test_only_one_leads_and_clean_handover() -> None:
    store = FakeLeases()
    a, b = elector(store, "a"), elector(store, "b")
    a_leads, stop_a = asyncio.Event(), asyncio.Event()
    b_leads = asyncio.Event()

    async def lead_a() -> None:
        a_leads.set()
        await stop_a.wait()

    async def lead_b() -> None:
        b_leads.set()
        await asyncio.Event().wait()

    ta = asyncio.create_task(a.run(lead_a))
    await asyncio.wait_for(a_leads.wait(), 2)
    tb = asyncio.create_task(b.run(lead_b))
    await asyncio.sleep(0.3)
    assert a.is_leader and not b.is_leader and not b_leads.is_set()
    stop_a.set()  # a's work ends: it releases the lease
    await asyncio.wait_for(ta, 2)
    assert not a.lost
    assert store.stored is not None and store.stored.spec is not None
    assert store.stored.spec.holderIdentity in ("", "b")
    await asyncio.wait_for(b_leads.wait(), 0.5)  # well under a lease duration: released, not expired
    assert store.stored.spec is not None
    assert store.stored.spec.holderIdentity == "b" and store.stored.spec.leaseTransitions == 1
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


async def test_crashed_leader_is_replaced_after_expiry() -> None:
    store = FakeLeases()
    a = elector(store, "a")
    assert await a.try_acquire_or_renew()  # a acquires once and then "crashes" (never renews)
    b = elector(store, "b")
    b_leads = asyncio.Event()

    async def lead_b() -> None:
        b_leads.set()
        await asyncio.Event().wait()

    loop = asyncio.get_running_loop()
    start = loop.time()
    tb = asyncio.create_task(b.run(lead_b))
    await asyncio.wait_for(b_leads.wait(), 3)
    waited = loop.time() - start
    assert 0.9 <= waited <= 1.5
    tb.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tb


async def test_leader_steps_down_when_api_is_unreachable() -> None:
    store = FakeLeases()
    a = elector(store, "a")
    cancelled = asyncio.Event()

    async def lead() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    ta = asyncio.create_task(a.run(lead))
    await asyncio.sleep(0.2)
    assert a.is_leader
    store.down = True
    await asyncio.wait_for(ta, 2)
    assert cancelled.is_set() and not a.is_leader and a.lost


async def test_the_leader_renews_without_reading_until_someone_else_writes() -> None:
    store = FakeLeases()
    a = elector(store, "a")
    assert await a.try_acquire_or_renew()  # created
    assert store.gets == 1
    for _ in range(3):
        assert await a.try_acquire_or_renew()
    assert (store.gets, store.writes) == (1, 3)  # one request per renewal
    assert store.stored is not None and store.stored.spec is not None
    assert store.stored.spec.holderIdentity == "a" and store.stored.spec.leaseTransitions == 0
    taken = copy.deepcopy(store.stored)  # another replica takes the Lease over (say, after a pause)
    assert taken.spec is not None and taken.metadata is not None
    taken.spec.holderIdentity = "b"
    store.version += 1
    taken.metadata.resourceVersion = str(store.version)
    store.stored = taken
    assert not await a.try_acquire_or_renew()  # the replace conflicts: read, and b's Lease is still valid
    assert store.gets == 2 and store.stored.spec is not None and store.stored.spec.holderIdentity == "b"
    assert not await a.try_acquire_or_renew()
    assert store.gets == 3  # no longer the leader: reads every round again
