"""A simulated RMD (Resource Management Daemon) speaking the v0.3 REST API.

``RmdState`` is the daemon's behaviour as a plain object: workload ids from a sequence that is never reused,
cache pools with per-way accounting, classes of service (CLOS) that run out, the ``uuid`` and CPU
uniqueness checks, and RMD's error texts and status codes (including its habit of answering enforcement
errors with 500). ``serve_rmd`` puts it behind aiohttp with RMD's TLS modes: plain HTTP (RMD's ``-d`` debug
mode, port 8081) or HTTPS with client certificates (``challenge``, port 8443), whose organisational unit is
the role RMD authorises (Admin and Root may change workloads, User may only read).

Run one with ``python -m intel_device_plugins.sim.rmd --port 8443 --certs DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

from intel_device_plugins.rmd import cpuset

log = logging.getLogger(__name__)

MAX_BODY: Final = 1 << 20
READ_ERROR: Final = "Failed to read request correctly. Please check request syntax and data"
VALIDATE_PREFIX: Final = "Failed to validate workload. Reason: "
DB_PREFIX: Final = "Workload validation in database failed. Details: "
NOT_FOUND: Final = "404: Could not found workload"
MBA_MAX_MBPS: Final = 4294967290
# Roles RMD's URL policy knows; admin ⊇ root ⊇ user. Only root and admin may change workloads.
WRITE_ROLES: Final = frozenset({"admin", "root"})
KNOWN_ROLES: Final = frozenset({"admin", "root", "user"})


@dataclasses.dataclass(frozen=True)
class Machine:
    """The simulated host: sockets with one L3 cache each, its way pools, CLOS count and MBA."""

    sockets: int = 2
    cpus_per_socket: int = 16
    ways: int = 11
    os_ways: str = "0"
    guaranteed_ways: str = "1-6"
    besteffort_ways: str = "7-8"
    shared_ways: str = "9-10"
    clos: int = 16
    mba: bool = True
    mba_mode: str = "percentage"  # or "mbps"
    policies: Mapping[str, tuple[int, int]] = dataclasses.field(
        default_factory=lambda: {"gold": (4, 4), "silver": (3, 1), "bronze": (0, 0)}
    )
    plugins: frozenset[str] = frozenset({"pstate"})
    pids: frozenset[int] = frozenset()

    def cache_cpus(self, cache_id: int) -> frozenset[int]:
        start = cache_id * self.cpus_per_socket
        return frozenset(range(start, start + self.cpus_per_socket))

    @property
    def all_cpus(self) -> frozenset[int]:
        return frozenset(range(self.sockets * self.cpus_per_socket))


class RmdError(Exception):
    """An answer other than success: the status code and RMD's plain-text body."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _invalid(reason: str) -> RmdError:
    return RmdError(400, VALIDATE_PREFIX + reason)


def _db(reason: str) -> RmdError:
    return RmdError(400, VALIDATE_PREFIX + DB_PREFIX + reason + "\n")


def _go_slice(values: list[int]) -> str:
    return "[" + " ".join(str(v) for v in values) + "]"


@dataclasses.dataclass
class _Held:
    """What one enforced workload holds: ways per cache id, and its CLOS."""

    ways: dict[int, frozenset[int]]
    clos: int | None
    cpus: frozenset[int]


class RmdState:
    """RMD's workload database and resource accounting."""

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = machine or Machine()
        self.workloads: dict[str, dict[str, Any]] = {}
        self._held: dict[str, _Held] = {}
        self._next_id = 1
        self.requests = 0

    # -------------------------------------------------------------- queries

    def list_workloads(self) -> list[dict[str, Any]]:
        return [dict(w) for _, w in sorted(self.workloads.items(), key=lambda kv: int(kv[0]))]

    def get_workload(self, wid: str) -> dict[str, Any]:
        if wid not in self.workloads:
            raise RmdError(404, NOT_FOUND)
        return dict(self.workloads[wid])

    def _pool(self, text: str) -> frozenset[int]:
        return cpuset.parse(text)

    def _free(self, cache_id: int, pool: frozenset[int]) -> frozenset[int]:
        used: set[int] = set()
        for held in self._held.values():
            used |= held.ways.get(cache_id, frozenset())
        return pool - used

    def cache_info(self, cache_id: int) -> dict[str, Any]:
        m = self.machine
        cpus = m.cache_cpus(cache_id)
        guaranteed = self._free(cache_id, self._pool(m.guaranteed_ways))
        besteffort = self._free(cache_id, self._pool(m.besteffort_ways))
        free_mask = sum(1 << w for w in guaranteed | besteffort)
        used_cpus: set[int] = set()
        for held in self._held.values():
            used_cpus |= held.cpus
        return {
            "cache_id": cache_id,
            "NumWays": m.ways,
            "NumSets": 49152,
            "NumPartitions": 1,
            "LineSize": 64,
            "total_size": 36608 * 1024,
            "WaySize": 36608 * 1024 // m.ways,
            "NumClasses": m.clos,
            "WayContention": 0,
            "CacheLevel": 3,
            "location_on_socket": cache_id,
            "location_on_node": str(cache_id),
            "share_cpu_list": cpuset.format_cpus(cpus),
            "available_ways": f"{free_mask:x}",
            "available_cpus": cpuset.format_cpus(cpus - used_cpus),
            "available_isolated_cpus": "",
            "available_policy": {p: 1 for p in m.policies},
            "available_ways_pool": {
                "guaranteed": cpuset.format_cpus(guaranteed),
                "besteffort": cpuset.format_cpus(besteffort),
                "shared": m.shared_ways,
                "infra": "",
                "os": m.os_ways,
            },
        }

    def cache_level(self, level: str) -> dict[str, Any]:
        if level not in ("l3", "llc"):
            number = level.lstrip("l")
            raise RmdError(
                400,
                f"Error to get available cache. Details: Don't support cache level {number}, "
                "Only expose last level cache 3",
            )
        caches = {str(i): self.cache_info(i) for i in range(self.machine.sockets)}
        return {"number": len(caches), "Caches": caches}

    def cache_one(self, level: str, cache_id: str) -> dict[str, Any]:
        self.cache_level(level)
        if not cache_id.isdigit() or int(cache_id) >= self.machine.sockets:
            raise RmdError(404, f"Cache id {cache_id} for level 3 is not found")
        return self.cache_info(int(cache_id))

    def cache_summary(self) -> dict[str, Any]:
        return {
            "rdt": True,
            "cqm": True,
            "cdp": False,
            "cdp_enable": False,
            "cat": True,
            "cat_enable": True,
            "caches": {
                "llc": {"number": self.machine.sockets, "caches_id": list(range(self.machine.sockets))}
            },
        }

    def mba_info(self) -> dict[str, Any]:
        return {"mba": self.machine.mba, "mba_enable": self.machine.mba, "mba_step": 10, "mba_min": 10}

    def policies(self) -> dict[str, Any]:
        return {
            "skylake": {
                name: [{"rdt": {"cache": {"max": mx, "min": mn}}}]
                for name, (mx, mn) in self.machine.policies.items()
            }
        }

    # -------------------------------------------------------------- validation

    def _cpus_of(self, body: Mapping[str, Any]) -> frozenset[int]:
        try:
            cpus = cpuset.parse_all(str(c) for c in body.get("core_ids") or ())
        except cpuset.CpusetError as exc:
            raise _invalid("Invalid params (core ids) received") from exc
        if not cpus <= self.machine.all_cpus:
            raise _invalid("Invalid params (core ids) received")
        return cpus

    def _cache_request(self, body: Mapping[str, Any]) -> tuple[int, int] | None:
        """(max, min) from the policy or rdt.cache; None when the workload asks for no cache."""
        policy = body.get("policy") or ""
        if policy:
            if policy not in self.machine.policies:
                raise _invalid(f"Could not find the Policy. Can not find specified policy {policy}")
            return self.machine.policies[policy]
        cache = ((body.get("rdt") or {}).get("cache")) or None
        if cache is None:
            return None
        if ("max" in cache) != ("min" in cache):
            raise _invalid("Need to provide both cache.* or none of them")
        mx, mn = int(cache.get("max", 0)), int(cache.get("min", 0))
        if mn > mx:
            raise _invalid("Min cache value cannot be greater than max cache value")
        if mx > 0 and mn == 0:
            raise _invalid(f"Bad cache ways request. Details: max_cache={mx}, min_cache=0, doesn't support")
        return mx, mn

    def _validate(
        self, body: Mapping[str, Any], exclude: str | None = None
    ) -> tuple[frozenset[int], tuple[int, int] | None]:
        m = self.machine
        tasks = body.get("task_ids") or []
        if not tasks and not body.get("core_ids"):
            raise _invalid("No task or core id specified")
        for task in tasks:
            if not str(task).isdigit() or int(task) not in m.pids:
                raise _invalid(f"The task: {task} does not exist")
        cpus = self._cpus_of(body)
        rdt = body.get("rdt") or {}
        plugins = body.get("plugins") or {}
        if not body.get("policy") and not rdt.get("cache") and not rdt.get("mba") and not plugins:
            raise _invalid("No RDT/Plugins params in workload")
        cache = self._cache_request(body)
        mba = rdt.get("mba") or {}
        if mba:
            if not m.mba:
                raise _invalid("This machine supports only cache and not MBA")
            if m.mba_mode == "percentage" and "percentage" not in mba:
                raise _invalid("Please provide MBA in Percentage")
            if m.mba_mode == "mbps" and "mbps" not in mba:
                raise _invalid("Please provide MBA in Mbps")
            if cache is None:
                raise _invalid("Need to provide both cache and mba for better performance")
            if not (cache[0] == cache[1] > 0):
                raise _invalid("MBA only supported for Guaranteed Request and not for BestEffort and Shared")
            value, top = (
                (mba.get("percentage"), 100)
                if m.mba_mode == "percentage"
                else (mba.get("mbps"), MBA_MAX_MBPS)
            )
            if not isinstance(value, int) or not 1 <= value <= top:
                raise _invalid(f"MBA values in should range from 1 to {top}")
        for module in plugins:
            if module not in m.plugins:
                raise _invalid("Trying to use module that is not loaded")
        uuid = body.get("uuid") or ""
        for wid, other in self.workloads.items():
            if wid == exclude:
                continue
            if uuid and other.get("uuid") == uuid:
                raise _db(f"UUID {uuid} already exists in workload {wid}")
            clash = sorted(cpus & self._held[wid].cpus)
            if clash:
                raise _db(f"CPU list {_go_slice(clash)} has been assigned")
        return cpus, cache

    # -------------------------------------------------------------- enforcement

    def _enforce(self, cpus: frozenset[int], cache: tuple[int, int] | None, exclude: str | None) -> _Held:
        m = self.machine
        if cache is None or cache[0] == 0:
            return _Held({}, None, cpus)  # shared group: no ways or CLOS of its own
        mx, mn = cache
        pool = self._pool(m.guaranteed_ways if mx == mn else m.besteffort_ways)
        ways: dict[int, frozenset[int]] = {}
        for cache_id in range(m.sockets):
            if not cpus & m.cache_cpus(cache_id):
                continue
            free = sorted(self._free(cache_id, pool))
            if len(free) < mn:
                raise RmdError(500, f"Not enough cache left on cache_id {cache_id}")
            ways[cache_id] = frozenset(free[:mn])
        used = {h.clos for w, h in self._held.items() if w != exclude and h.clos is not None}
        # COS0 is the default (OS) group and COS1 the shared group.
        free_clos = [c for c in range(2, m.clos) if c not in used]
        if not free_clos:
            raise RmdError(500, "No free CLOS available")
        return _Held(ways, free_clos[0], cpus)

    def _record(
        self, wid: str, body: Mapping[str, Any], held: _Held, cache: tuple[int, int] | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": wid,
            "core_ids": list(body.get("core_ids") or []),
            "task_ids": list(body.get("task_ids") or []),
            "policy": body.get("policy") or "",
            "status": "Successful",
            "cos_name": f"COS{held.clos}" if held.clos is not None else "COS1",
            "uuid": body.get("uuid") or "",
            "origin": "REST",
        }
        rdt: dict[str, Any] = {}
        if cache is not None:
            rdt["cache"] = {"max": cache[0], "min": cache[1]}
        mba = (body.get("rdt") or {}).get("mba") or {}
        if mba:
            rdt["mba"] = {k: v for k, v in mba.items() if k in ("percentage", "mbps")}
        if rdt:
            out["rdt"] = rdt
        if body.get("plugins"):
            out["plugins"] = body["plugins"]
        return out

    def create(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise RmdError(500, READ_ERROR)
        cpus, cache = self._validate(body)
        held = self._enforce(cpus, cache, None)
        wid = str(self._next_id)
        self._next_id += 1
        self._held[wid] = held
        self.workloads[wid] = self._record(wid, body, held, cache)
        return dict(self.workloads[wid])

    def patch(self, wid: str, body: Any) -> tuple[int, Any]:
        if wid not in self.workloads:
            raise RmdError(404, NOT_FOUND)
        old = self.workloads[wid]
        if old.get("origin") != "REST":
            return 200, "200: You only have permission to modify REST origin workloads"
        if not isinstance(body, dict):
            raise RmdError(500, READ_ERROR)
        merged = {
            **old,
            **{k: v for k, v in body.items() if k in ("core_ids", "task_ids", "policy", "rdt", "plugins")},
        }
        resources = ("policy", "rdt", "plugins")
        resources_changed = any(
            merged.get(k) != old.get(k) and (merged.get(k) or old.get(k)) for k in resources
        )
        ids_changed = any(
            sorted(merged.get(k) or []) != sorted(old.get(k) or []) for k in ("core_ids", "task_ids")
        )
        if not resources_changed and not ids_changed:
            return 200, dict(old)
        if not resources_changed:
            # RMD re-validates the whole workload against its database, where it already is.
            raise _db(f"Workload with id {wid} already exists")
        mba = (merged.get("rdt") or {}).get("mba") or {}
        for key, top in (("percentage", 100), ("mbps", MBA_MAX_MBPS)):
            if key in mba and not (isinstance(mba[key], int) and 1 <= mba[key] <= top):
                raise _invalid(f"MBA values range only from 1 to {top}")
        merged["uuid"] = old.get("uuid") or ""
        cpus, cache = self._validate(merged, exclude=wid)
        previous = self._held.pop(wid)
        try:
            held = self._enforce(cpus, cache, wid)
        except RmdError:
            self._held[wid] = previous
            raise
        self._held[wid] = held
        self.workloads[wid] = self._record(wid, merged, held, cache)
        return 200, dict(self.workloads[wid])

    def delete(self, wid: str) -> None:
        if wid not in self.workloads:
            raise RmdError(404, NOT_FOUND)
        if self.workloads[wid].get("origin") != "REST":
            raise RmdError(200, "200: You only have permission to delete REST origin workloads")
        del self.workloads[wid]
        del self._held[wid]


# ------------------------------------------------------------------ HTTP shell


def client_identity(request: web.Request) -> tuple[str, str] | None:
    """(role, user) from the verified client certificate, or None on a plain connection."""
    transport = request.transport
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    if sslobj is None:
        return None
    der = sslobj.getpeercert(binary_form=True)
    if not der:
        return ("", "")
    cert = x509.load_der_x509_certificate(der)
    ous = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return (str(ous[0].value) if ous else "", str(cns[0].value) if cns else "")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(data), content_type="application/json")


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


def make_app(state: RmdState) -> web.Application:
    """RMD's ``/v1`` routes over ``state``, with its certificate ACL when the connection is TLS."""

    @web.middleware
    async def acl(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests += 1
        identity = client_identity(request)
        if identity is not None:
            role, user = identity
            if role.lower() not in KNOWN_ROLES:
                return _text(401, f"{user} is not authorized")
            writes = request.method in ("POST", "PATCH", "DELETE")
            if writes and role.lower() not in WRITE_ROLES:
                return _text(403, f'User "{user}" is not authorized to access this resource')
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except RmdError as err:
            return _text(err.status, err.text)

    async def read_body(request: web.Request) -> Any:
        try:
            return json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            raise RmdError(500, READ_ERROR) from None

    async def list_workloads(_: web.Request) -> web.Response:
        return _json(state.list_workloads())

    async def create(request: web.Request) -> web.Response:
        return _json(state.create(await read_body(request)), 201)

    async def get_one(request: web.Request) -> web.Response:
        return _json(state.get_workload(request.match_info["id"]))

    async def patch(request: web.Request) -> web.Response:
        status, out = state.patch(request.match_info["id"], await read_body(request))
        return _text(status, out) if isinstance(out, str) else _json(out, status)

    async def delete(request: web.Request) -> web.Response:
        state.delete(request.match_info["id"])
        return _text(200, "")

    async def cache(_: web.Request) -> web.Response:
        return _json(state.cache_summary())

    async def cache_level(request: web.Request) -> web.Response:
        return _json(state.cache_level(request.match_info["level"]))

    async def cache_one(request: web.Request) -> web.Response:
        return _json(state.cache_one(request.match_info["level"], request.match_info["id"]))

    async def policy(_: web.Request) -> web.Response:
        return _json(state.policies())

    async def mba(_: web.Request) -> web.Response:
        return _json(state.mba_info())

    async def hospitality(_: web.Request) -> web.Response:
        return _json({"score": {"l3": {str(i): 100 for i in range(state.machine.sockets)}}})

    app = web.Application(middlewares=[acl], client_max_size=MAX_BODY)
    app.router.add_get("/v1/workloads", list_workloads)
    app.router.add_post("/v1/workloads", create)
    app.router.add_get(r"/v1/workloads/{id:[0-9]*}", get_one)
    app.router.add_patch(r"/v1/workloads/{id:[0-9]*}", patch)
    app.router.add_delete(r"/v1/workloads/{id:[0-9]*}", delete)
    app.router.add_get("/v1/cache", cache)
    app.router.add_get("/v1/cache/{level}", cache_level)
    app.router.add_get("/v1/cache/{level}/{id}", cache_one)
    app.router.add_get("/v1/policy", policy)
    app.router.add_get("/v1/mba", mba)
    app.router.add_post("/v1/hospitality", hospitality)
    return app


def server_tls(ca: Path, cert: Path, key: Path, client_auth: str = "challenge") -> ssl.SSLContext:
    """RMD's HTTPS: ``challenge``/``require`` verify client certificates against ``ca``; ``no`` asks none."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    if client_auth == "no":
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.load_verify_locations(cafile=str(ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@contextlib.asynccontextmanager
async def serve_rmd(
    state: RmdState, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve ``state`` and yield its base URL (``https://`` with ``tls``, else ``http://``)."""
    runner = web.AppRunner(make_app(state), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    bound = runner.addresses[0][1]
    try:
        yield f"{'https' if tls else 'http'}://{host}:{bound}"
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Simulated RMD (v0.3 REST API).")
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--certs", type=Path, help="directory with ca.pem, rmd-cert.pem, rmd-key.pem")
    parser.add_argument("--clientauth", default="challenge", choices=["challenge", "require", "no"])
    parser.add_argument("-d", "--debug", action="store_true", help="plain HTTP, no ACL (RMD's debug mode)")
    parser.add_argument("--sockets", type=int, default=2)
    parser.add_argument("--cpus-per-socket", type=int, default=16)
    parser.add_argument("--count", type=int, default=1, help="independent RMDs, one per node (ports from 0)")
    parser.add_argument("--urls-file", type=Path, help="write the RMDs' base URLs here, one a line")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if not args.debug and args.certs is None:
        parser.error("--certs is required unless -d (debug, plain HTTP) is given")
    tls = (
        None
        if args.debug
        else server_tls(
            args.certs / "ca.pem", args.certs / "rmd-cert.pem", args.certs / "rmd-key.pem", args.clientauth
        )
    )
    machine = Machine(sockets=args.sockets, cpus_per_socket=args.cpus_per_socket)

    async def run() -> None:
        async with contextlib.AsyncExitStack() as stack:
            urls = []
            for i in range(args.count):
                port = args.port if args.count == 1 else 0
                urls.append(
                    await stack.enter_async_context(serve_rmd(RmdState(machine), args.address, port, tls))
                )
                log.info("simulated RMD %d on %s", i, urls[-1])
            if args.urls_file is not None:
                tmp = args.urls_file.with_suffix(".tmp")
                tmp.write_text("".join(u + "\n" for u in urls))
                tmp.replace(args.urls_file)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
