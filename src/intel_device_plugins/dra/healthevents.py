"""Kubernetes Events on the node when one of a driver's devices turns unhealthy and when it recovers.

The ResourceSlice taint keeps new claims away and the kubelet's health stream tells the pods; an Event
is what an administrator sees in ``kubectl describe node`` and ``kubectl get events``. One Event per
change of state: :func:`health_changes` compares two inventories, so a device that stays unhealthy
over many scans is told once, and ``Healthy`` ↔ ``Unknown`` (a health source going away and coming
back) is no change worth an Event. Posting runs in a task of its own with a bounded queue: an API
server that does not answer never holds up scanning, and when changes pile up faster than they can
be posted the oldest are dropped (and counted in the log) rather than memory growing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from intel_device_plugins.dra.model import Device, HealthState, Inventory
from intel_device_plugins.kube.rest import EVENTS

log = logging.getLogger(__name__)

NODE_EVENTS_NAMESPACE: Final = "default"
"""Where Events about a node live (the kubelet's own node Events are there too)."""
UNHEALTHY_REASON: Final = "DeviceUnhealthy"
RECOVERED_REASON: Final = "DeviceRecovered"
MAX_EVENT_MESSAGE: Final = 1024
"""Event messages are kept short; the full story is in the driver's log."""
MAX_PENDING_EVENTS: Final = 256


@dataclass(frozen=True)
class HealthChange:
    """One device turning unhealthy (``unhealthy``) or recovering from it, and why; ``now`` is the
    health it recovered to (``Unknown`` when the source that found the problem went away)."""

    device: str
    unhealthy: bool
    message: str
    now: HealthState = HealthState.HEALTHY


def health_changes(old: Inventory | None, new: Inventory) -> tuple[HealthChange, ...]:
    """The devices of ``new`` whose health crossed into or out of ``Unhealthy`` since ``old``.

    Before the first inventory (``old`` is ``None``) every device counts as healthy, so a device
    already broken when the driver starts is told about. A device that left the inventory is no change.
    """
    before: Mapping[str, Device] = old.by_name() if old is not None else {}
    changes = []
    for device in sorted(new.devices, key=lambda d: d.name):
        now_bad = device.reported_health is HealthState.UNHEALTHY
        previous = before.get(device.name)
        was_bad = previous is not None and previous.reported_health is HealthState.UNHEALTHY
        if now_bad and not was_bad:
            changes.append(HealthChange(device.name, True, device.health_message or "unhealthy"))
        elif was_bad and not now_bad and previous is not None:  # (previous is set when was_bad)
            message = previous.health_message or "unhealthy"
            changes.append(HealthChange(device.name, False, message, device.reported_health))
    return tuple(changes)


def node_event(driver: str, node: str, change: HealthChange, now: datetime) -> dict[str, Any]:
    """The ``v1`` Event about ``node`` for one change, named by the API server (``generateName``)."""
    if change.unhealthy:
        reason, kind = UNHEALTHY_REASON, "Warning"
        message = f"{driver} device {change.device} is unhealthy: {change.message}"
    else:
        reason, kind = RECOVERED_REASON, "Normal"
        state = (
            "healthy again" if change.now is HealthState.HEALTHY else f"no longer unhealthy, now {change.now}"
        )
        message = f"{driver} device {change.device} is {state} (was: {change.message})"
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.", "namespace": NODE_EVENTS_NAMESPACE},
        # The kubelet names a node by its name for the uid too; kubectl describe node finds these.
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason,
        "message": message[:MAX_EVENT_MESSAGE],
        "type": kind,
        "source": {"component": driver, "host": node},
        "reportingComponent": driver,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventCreator(Protocol):
    """What posting needs of :class:`intel_device_plugins.kube.rest.RestClient`."""

    async def create(self, res: Any, obj: Mapping[str, Any], namespace: str | None = None) -> Any: ...


class NodeEvents:
    """Posts one Event per health change of one driver's devices, from a task of its own (:meth:`run`).

    A failed post is logged and dropped: an Event is a notice, the slice and the health stream carry
    the state itself.
    """

    def __init__(
        self,
        client: EventCreator,
        driver: str,
        node: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.driver = driver
        self.node = node
        self._clock = clock
        self._pending: asyncio.Queue[HealthChange] = asyncio.Queue(MAX_PENDING_EVENTS)
        self.posted = 0
        self.dropped = 0

    def inventory_changed(self, old: Inventory | None, new: Inventory) -> None:
        for change in health_changes(old, new):
            if self._pending.full():
                self._pending.get_nowait()
                self.dropped += 1
                log.warning(
                    "%s: health Events pile up; dropped the oldest (%d so far)", self.driver, self.dropped
                )
            self._pending.put_nowait(change)

    async def run(self) -> None:
        """Post queued changes until cancelled."""
        while True:
            change = await self._pending.get()
            event = node_event(self.driver, self.node, change, self._clock())
            try:
                await self.client.create(EVENTS, event, namespace=NODE_EVENTS_NAMESPACE)
                self.posted += 1
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning("%s: could not post the Event %r: %s", self.driver, event["message"], error)


class NoEvents:
    """The events part of a driver that posts none (tests, drivers built without an API client)."""

    def inventory_changed(self, old: Inventory | None, new: Inventory) -> None:
        return None

    async def run(self) -> None:
        return None
