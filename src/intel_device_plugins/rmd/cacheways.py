"""``intel-rmd-deviceplugin``: the ways of RMD's guaranteed cache pool as ``intel.com/l3_cache_ways``.

Device IDs, NUMA nodes and the container variable follow upstream: a way ``w`` of the cache on NUMA node
``n`` is device ``f"{n}{w}"`` (``f"{n}-{w}"`` on hosts with NUMA nodes from 10 on, where upstream's IDs
collide). Unlike upstream, the pool is read over the same mutual-TLS client as the operator's and kept
current: RMD is asked again every ``-refresh`` seconds (and sooner after a failure). The advertised set is
every way seen in the guaranteed pool since the cache layout last changed, so ways RMD has handed to pods'
workloads (and so left its free list) stay allocatable to the kubelet. Ways held by workloads the kubelet
knows nothing of (RmdWorkloads written by hand, other RMD clients) are reported Unhealthy, so the kubelet
never admits more than RMD can give; while RMD cannot be read, every way is Unhealthy rather than withdrawn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import aiohttp

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    positive_float,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.model import (
    ContainerAllocation,
    DeviceInfo,
    DeviceMap,
    DeviceTree,
    Health,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.rmd import cpuset
from intel_device_plugins.rmd.agent import WORKLOAD_INFIX
from intel_device_plugins.rmd.client import (
    RmdCallError,
    RmdClient,
    TlsReloader,
    Transport,
)

log = logging.getLogger(__name__)

NAMESPACE: Final = "intel.com"
RESOURCE_TYPE: Final = "l3_cache_ways"
ENV_NAME: Final = "intel.com/l3_cache_ways"


@dataclasses.dataclass(frozen=True)
class Ways:
    """Device ID → NUMA node of every way in the guaranteed pool, the IDs of each cache (by way number) and
    the cache layout they came from."""

    devices: Mapping[str, int]
    layout: tuple[tuple[str, str], ...]
    by_cache: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def guaranteed_ways(cache_l3: Mapping[str, Any]) -> Ways:
    """Parse ``GET /v1/cache/l3``; ValueError naming the cache when a field is malformed."""
    caches = cache_l3.get("Caches")
    if not isinstance(caches, Mapping):
        raise ValueError("RMD's /v1/cache/l3 answer has no Caches object")
    pools: list[tuple[str, str, list[int]]] = []
    layout = []
    for cache_id, info in sorted(caches.items()):
        node = str((info or {}).get("location_on_node", ""))
        if not node.isdigit():
            raise ValueError(f"cache {cache_id}: location_on_node {node!r} is not a NUMA node number")
        pool = str(((info.get("available_ways_pool") or {}).get("guaranteed")) or "")
        try:
            ways = sorted(cpuset.parse(pool))
        except cpuset.CpusetError as exc:
            raise ValueError(f"cache {cache_id}: guaranteed pool {pool!r}: {exc}") from exc
        pools.append((str(cache_id), node, ways))
        layout.append((str(cache_id), str(info.get("share_cpu_list", ""))))
    # Upstream's IDs ("{node}{way}") are unambiguous only while every NUMA node is a single digit.
    separator = "-" if any(int(node) >= 10 for _, node, _ in pools) else ""
    devices: dict[str, int] = {}
    by_cache: dict[str, tuple[str, ...]] = {}
    for cache_id, node, ways in pools:
        ids = tuple(f"{node}{separator}{way}" for way in ways)
        devices.update(dict.fromkeys(ids, int(node)))
        by_cache[cache_id] = ids
    return Ways(devices, tuple(layout), by_cache)


def merge(known: Ways | None, seen: Ways) -> Ways:
    """Ways seen so far: a new cache layout starts over; otherwise ways only join the set."""
    if known is None or known.layout != seen.layout:
        return seen
    by_cache = {
        c: tuple(sorted({*known.by_cache.get(c, ()), *seen.by_cache.get(c, ())}, key=_way_order))
        for c in {*known.by_cache, *seen.by_cache}
    }
    return Ways({**known.devices, **seen.devices}, known.layout, by_cache)


def _way_order(device_id: str) -> tuple[int, str]:
    return len(device_id), device_id


def held_outside_the_kubelet(
    known: Ways, cache_l3: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]
) -> frozenset[str]:
    """Device IDs to report Unhealthy: per cache, as many ways as RMD's guaranteed pool lacks beyond what
    pods' workloads (the node agent's ``<namespace>/<pod>-rmd-workload-<container>``) hold there.

    Those are ways the kubelet cannot know are gone: hand-written RmdWorkloads and other RMD clients took
    them. Which IDs go does not matter (ways are interchangeable); the highest are taken.
    """
    free = guaranteed_ways(cache_l3).by_cache
    cpus = {
        str(c): cpuset.parse(str((info or {}).get("share_cpu_list", "")))
        for c, info in (cache_l3.get("Caches") or {}).items()
    }
    pods: dict[str, int] = {}
    for w in workloads:
        cache = (w.get("rdt") or {}).get("cache") or {}
        ways = int(cache.get("min") or 0)
        if WORKLOAD_INFIX not in str(w.get("uuid") or "") or ways == 0 or cache.get("max") != ways:
            continue
        try:
            used = cpuset.parse_all(str(c) for c in w.get("core_ids") or ())
        except cpuset.CpusetError:
            continue
        for cache_id, shared in cpus.items():
            if used & shared:
                pods[cache_id] = pods.get(cache_id, 0) + ways
    out: set[str] = set()
    for cache_id, ids in known.by_cache.items():
        foreign = len(ids) - len(free.get(cache_id, ())) - pods.get(cache_id, 0)
        if foreign > 0:
            out.update(ids[-foreign:])
    return frozenset(out)


def device_tree(ways: Ways | None, healthy: bool, unavailable: frozenset[str] = frozenset()) -> DeviceTree:
    if ways is None:
        return {}

    def health(device_id: str) -> Health:
        return Health.HEALTHY if healthy and device_id not in unavailable else Health.UNHEALTHY

    devices = {i: DeviceInfo(health=health(i), numa_nodes=(n,)) for i, n in ways.devices.items()}
    return {RESOURCE_TYPE: devices} if devices else {}


class PollerThread:
    """Runs the RMD poll loop on a daemon thread with an event loop of its own.

    The framework calls ``scan`` on its scan worker thread, where no event loop runs, so the poller cannot be
    a task of the caller's loop.
    """

    def __init__(self, poll: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._loop = asyncio.new_event_loop()
        self._task = self._loop.create_task(poll())
        self._thread = threading.Thread(target=self._run, name="rmd-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._task)
        self._loop.close()

    def cancel(self, timeout_s: float = 5.0) -> None:
        """Stop polling and wait (bounded) for the thread to close its HTTP session."""
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout_s)


@dataclasses.dataclass
class CacheWaysPlugin:
    """Framework plugin; a background task keeps ``ways`` current from RMD."""

    address: str
    transport: Transport
    refresh_s: float = 10.0
    retry_s: float = 2.0
    reloader: TlsReloader | None = None  # keeps the client certificate current with its Secret
    ways: Ways | None = None
    healthy: bool = False
    unavailable: frozenset[str] = frozenset()  # ways held by workloads the kubelet does not know
    _poller: PollerThread | None = None

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        if self._poller is None:
            self._poller = PollerThread(self._poll)
        return device_tree(self.ways, self.healthy, self.unavailable)

    async def refresh(self, rmd: RmdClient) -> None:
        try:
            cache_l3 = await rmd.get_cache_l3()
            seen = guaranteed_ways(cache_l3)
            workloads = await rmd.get_workloads()
        except (RmdCallError, ValueError) as exc:
            if self.healthy or self.ways is None:
                log.warning("cannot read the cache pool from RMD (%s); ways marked unhealthy", exc)
            self.healthy = False
            return
        if not self.healthy:
            log.info("RMD answers: %d guaranteed ways", len(seen.devices))
        self.ways = merge(self.ways, seen)
        unavailable = held_outside_the_kubelet(self.ways, cache_l3, workloads)
        if unavailable != self.unavailable:
            log.info("%d ways are held by workloads outside the kubelet's accounting", len(unavailable))
        self.unavailable = unavailable
        self.healthy = True

    async def _poll(self) -> None:
        async with aiohttp.ClientSession() as session:
            rmd = RmdClient(session, self.transport, self.address)
            while True:
                if self.reloader is not None:
                    self.reloader.check()
                await self.refresh(rmd)
                await asyncio.sleep(self.refresh_s if self.healthy else self.retry_s)

    def post_allocate(
        self, resource: str, devices: DeviceMap, ids: Sequence[str], allocation: ContainerAllocation
    ) -> ContainerAllocation:
        """Upstream's variable: the container's ways with their NUMA nodes ("05:0,06:0")."""
        value = ",".join(f"{i}:{devices[i].numa_nodes[0] if devices[i].numa_nodes else ''}" for i in ids)
        return dataclasses.replace(allocation, envs={**allocation.envs, ENV_NAME: value})


def build_parser() -> GoFlagParser:
    parser = new_parser("intel-rmd-deviceplugin", "RMD cache ways (intel.com/l3_cache_ways) device plugin")
    parser.add_flag("rmd-address", default="https://127.0.0.1:8443", help="RMD's base URL")
    parser.add_flag("tls-dir", default="/etc/rmd-tls", help="ca.crt, tls.crt and tls.key for RMD")
    parser.add_flag("refresh", type=positive_float, default=10.0, help="seconds between reads of RMD's pool")
    parser.add_bool_flag("insecure-plain-http", help="DEBUG ONLY: plain HTTP to RMD without authentication")
    return parser


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    reloader = None
    if args.insecure_plain_http:
        transport = Transport(None, allow_plain_http=True)
    else:
        reloader = TlsReloader.start(Path(args.tls_dir))
        transport = Transport(reloader.context)
    if not args.rmd_address.startswith("https://") and not args.insecure_plain_http:
        raise ValueError(f"-rmd-address {args.rmd_address}: RMD is reached over HTTPS only")
    return [CacheWaysPlugin(args.rmd_address, transport, args.refresh, reloader=reloader)]


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
