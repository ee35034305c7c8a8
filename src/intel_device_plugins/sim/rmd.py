"""A simulated RMD (Resource Management Daemon) speaking the v0.3 REST API.

``RmdState`` is the daemon's behaviour as a plain object: workload ids from a sequence that is never reused,
cache pools with per-way accounting, classes of service (CLOS) that run out, the ``uuid`` and CPU
uniqueness checks, PATCH that changes only what it names, policies that fill ``rdt.cache``, and RMD's error
texts and status codes (including its habit of answering enforcement errors with 500). ``serve_rmd`` puts it
behind aiohttp with RMD's TLS modes and its access control list: plain HTTP (RMD's ``-d`` debug mode, port
8081), or HTTPS with client certificates (``challenge``, port 8443) checked as ``[acl] authorization`` says.
RMD's default is ``signature``: only certificates found in the ``admincert`` and ``usercert`` directories are
let in, so an RMD nobody configured refuses every client, as the real daemon does.

Run one as the RMD DaemonSet runs the daemon: ``python -m intel_device_plugins.sim.rmd --conf-dir DIR``
(``DIR/rmd.toml``), with ``--root`` standing in for the container's file system under the absolute paths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import ssl
import sys
import tomllib
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
# RMD's URL policy (``/etc/rmd/acl/url/policy.csv``): (role, path pattern, methods); admin ⊇ root ⊇ user.
URL_POLICY: Final = (
    ("user", re.compile(r"^/(cache(/l[^/]*(/[^/]*)?)?|policy|workloads(/[^/]*)?|hospitality)$"), ("GET",)),
    ("root", re.compile(r"^/workloads$"), ("POST",)),
    ("root", re.compile(r"^/workloads/[^/]*$"), ("PATCH", "DELETE")),
)
ROLE_INCLUDES: Final[Mapping[str, tuple[str, ...]]] = {
    "admin": ("admin", "root", "user"),
    "root": ("root", "user"),
    "user": ("user",),
}
# The role RMD gives a certificate found in the ``usercert`` directory (mapped to ``user``).
CERT_CLIENT_USER: Final = "Cert Client User"


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


def rmd_core_ids_ok(core_ids: Any) -> bool:
    """RMD's own reading of ``core_ids`` for plugins (P-state): every element one CPU ``N`` or one range
    ``A-B`` with A ≤ B, blanks around the numbers allowed; a list such as ``"1-2,9"`` is refused."""
    for element in core_ids:
        first, dash, last = str(element).partition("-")
        try:
            low = int(first.strip())
            high = int(last.strip()) if dash else low
        except ValueError:
            return False
        if high < low:
            return False
    return True


_UINT32_FIELDS: Final = (("cache", "max"), ("cache", "min"), ("mba", "percentage"), ("mba", "mbps"))


def _check_decodes(body: Any) -> None:
    """RMD decodes the body into typed fields: a value that does not fit (a negative cache size) is a read
    error, answered 500 before any validation."""
    if not isinstance(body, dict):
        raise RmdError(500, READ_ERROR)
    rdt = body.get("rdt") or {}
    if not isinstance(rdt, dict):
        raise RmdError(500, READ_ERROR)
    for group, key in _UINT32_FIELDS:
        value = (rdt.get(group) or {}).get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32
        ):
            raise RmdError(500, READ_ERROR)
    for key in ("core_ids", "task_ids"):
        if not isinstance(body.get(key) or [], list):
            raise RmdError(500, READ_ERROR)


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
            if not rmd_core_ids_ok(body.get("core_ids") or ()):
                raise _invalid("Invalid params (core ids) received")
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
        """The stored workload as RMD returns it: ``rdt`` always with ``cache`` and ``mba`` (empty objects
        when unset), the cache a policy fills in, and no ``task_ids`` or ``policy`` when they are empty."""
        out: dict[str, Any] = {"id": wid}
        if body.get("core_ids"):
            out["core_ids"] = list(body["core_ids"])
        if body.get("task_ids"):
            out["task_ids"] = list(body["task_ids"])
        if body.get("policy"):
            out["policy"] = body["policy"]
        mba = (body.get("rdt") or {}).get("mba") or {}
        out.update(
            {
                "status": "Successful",
                "cos_name": f"COS{held.clos}" if held.clos is not None else "COS1",
                "rdt": {
                    "cache": {"max": cache[0], "min": cache[1]} if cache is not None else {},
                    "mba": {k: v for k, v in mba.items() if k in ("percentage", "mbps")},
                },
                "uuid": body.get("uuid") or "",
                "origin": "REST",
            }
        )
        if body.get("plugins"):
            out["plugins"] = body["plugins"]
        return out

    def create(self, body: Any) -> dict[str, Any]:
        _check_decodes(body)
        cpus, cache = self._validate(body)
        held = self._enforce(cpus, cache, None)
        wid = str(self._next_id)
        self._next_id += 1
        self._held[wid] = held
        self.workloads[wid] = self._record(wid, body, held, cache)
        return dict(self.workloads[wid])

    def patch(self, wid: str, body: Any) -> tuple[int, Any]:
        """RMD's update: only what the body names changes; whatever it leaves out (MBA, a plugin, the cache)
        stays. A new policy, or changed cache, MBA percentage or plugin parameters re-enforce the workload
        (its plugins then become the body's); changed CPUs alone are re-validated against the database, where
        the workload already is, and fail with 500."""
        if wid not in self.workloads:
            raise RmdError(404, NOT_FOUND)
        old = self.workloads[wid]
        if old.get("origin") != "REST":
            return 200, "200: You only have permission to modify REST origin workloads"
        _check_decodes(body)
        new: dict[str, Any] = {k: v for k, v in old.items() if k not in ("rdt",)}
        old_rdt = old.get("rdt") or {}
        cache = dict(old_rdt.get("cache") or {})
        mba = dict(old_rdt.get("mba") or {})
        body_rdt = body.get("rdt") or {}
        reenforce = False
        if body.get("policy"):
            if body["policy"] != old.get("policy"):
                new["policy"] = body["policy"]
                reenforce = True
        else:
            for key in ("max", "min"):
                value = (body_rdt.get("cache") or {}).get(key)
                if value is not None:
                    new.pop("policy", None)
                    if cache.get(key) != value:
                        cache[key] = value
                        reenforce = True
            percentage = (body_rdt.get("mba") or {}).get("percentage")
            if percentage is not None:
                if not 1 <= percentage <= 100:
                    raise _invalid("MBA values range only from 1 to 100")
                new.pop("policy", None)
                if mba.get("percentage") != percentage:
                    mba["percentage"] = percentage
                    reenforce = True
            for module, params in (body.get("plugins") or {}).items():
                if (old.get("plugins") or {}).get(module) != params:
                    if module not in self.machine.plugins:
                        raise _invalid("Trying to use module that is not loaded")
                    if not rmd_core_ids_ok(old.get("core_ids") or ()):
                        raise RmdError(500, "Invalid params (core ids) received")
                    reenforce = True
        if not reenforce:
            if list(body.get("core_ids") or []) != list(old.get("core_ids") or []) or list(
                body.get("task_ids") or []
            ) != list(old.get("task_ids") or []):
                raise RmdError(500, VALIDATE_PREFIX + DB_PREFIX + f"Workload with id {wid} already exists\n")
            return 200, dict(old)
        new["rdt"] = {"cache": cache, "mba": mba}
        for key in ("core_ids", "task_ids"):
            if body.get(key):
                new[key] = body[key]
        new.pop("plugins", None)
        if body.get("plugins"):
            new["plugins"] = body["plugins"]
        cpus, request = self._validate(new, exclude=wid)
        previous = self._held.pop(wid)
        try:
            held = self._enforce(cpus, request, wid)
        except RmdError:
            self._held[wid] = previous
            raise
        self._held[wid] = held
        self.workloads[wid] = self._record(wid, new, held, request)
        return 200, dict(self.workloads[wid])

    def delete(self, wid: str) -> None:
        if wid not in self.workloads:
            raise RmdError(404, NOT_FOUND)
        if self.workloads[wid].get("origin") != "REST":
            raise RmdError(200, "200: You only have permission to delete REST origin workloads")
        del self.workloads[wid]
        del self._held[wid]


# ------------------------------------------------------------------ HTTP shell


@dataclasses.dataclass(frozen=True)
class Acl:
    """RMD's ``[acl]``: how a verified client certificate is authorised.

    ``signature``: a certificate whose signature matches one of the ``*.pem`` files in ``admincert`` is admin,
    one in ``usercert`` gets the ``user`` role, any other is refused with 401; ``role``: the organisational
    units are the roles; ``username``: the common name is. RMD re-reads both directories when they change.
    """

    authorization: str = "signature"
    admincert: Path | None = None
    usercert: Path | None = None


def _signatures(directory: Path | None) -> frozenset[bytes]:
    if directory is None:
        return frozenset()
    out = set()
    for path in sorted(directory.glob("*.pem")):
        with contextlib.suppress(OSError, ValueError):
            out.add(x509.load_pem_x509_certificate(path.read_bytes()).signature)
    return frozenset(out)


def allowed(role: str, method: str, path: str) -> bool:
    """RMD's URL policy for ``role`` (the ``/v1`` prefix removed from ``path``)."""
    granted = ROLE_INCLUDES.get(role.lower(), ())
    return any(r in granted and method in methods and rx.match(path) for r, rx, methods in URL_POLICY)


def authorize(acl: Acl, cert: x509.Certificate, method: str, path: str) -> tuple[int, str] | None:
    """None when RMD lets the request through, else its status and text."""
    obj = re.sub(r"^/v[0-9]+/", "/", path)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    if acl.authorization == "role":
        ous = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)]
        if any(allowed(ou, method, obj) for ou in ous):
            return None
        return 401, "OU: " + ", ".join(ous) + " is not authorized"
    if acl.authorization == "username":
        return (
            None
            if allowed(cn, method, obj)
            else (403, f'User "{cn}" is not authorized to access this resource\n')
        )
    if cert.signature in _signatures(acl.admincert):
        return None
    if cert.signature in _signatures(acl.usercert):
        if allowed("user", method, obj):
            return None
        return 403, f'User "{CERT_CLIENT_USER}" is not authorized to access this resource\n'
    return 401, f"{cn} is not authorized"


def _peer_certificate(request: web.Request) -> x509.Certificate | None:
    transport = request.transport
    sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    return x509.load_der_x509_certificate(der) if der else None


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(data), content_type="application/json")


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


RMD_DEFAULT_ACL: Final = Acl()  # ``signature`` without certificate directories: every client is refused


def make_app(state: RmdState, acl: Acl | None = RMD_DEFAULT_ACL) -> web.Application:
    """RMD's ``/v1`` routes over ``state``. On TLS connections with a client certificate ``acl`` decides
    (RMD's default unless given); None lets every request through, as RMD does with ``require``."""

    @web.middleware
    async def check(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests += 1
        cert = _peer_certificate(request) if acl is not None else None
        if acl is not None and cert is not None:
            refused = authorize(acl, cert, request.method, request.path)
            if refused is not None:
                return _text(*refused)
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

    app = web.Application(middlewares=[check], client_max_size=MAX_BODY)
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
    """RMD's HTTPS: ``challenge`` requires client certificates verified against ``ca``; ``require`` asks for
    one without verifying it (and RMD then skips its ACL)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    if client_auth == "challenge":
        ctx.load_verify_locations(cafile=str(ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


@contextlib.asynccontextmanager
async def serve_rmd(
    state: RmdState,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ssl.SSLContext | None = None,
    acl: Acl | None = RMD_DEFAULT_ACL,
) -> AsyncIterator[str]:
    """Serve ``state`` and yield its base URL (``https://`` with ``tls``, else ``http://``)."""
    runner = web.AppRunner(make_app(state, acl), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    bound = runner.addresses[0][1]
    try:
        yield f"{'https' if tls else 'http'}://{host}:{bound}"
    finally:
        await runner.cleanup()


# RMD's built-in defaults (``utils/config``, ``utils/acl/config``) and where it looks for rmd.toml.
_DEFAULT_CONF_DIRS: Final = ("/usr/local/etc/rmd", "/etc/rmd", "etc/rmd")


@dataclasses.dataclass(frozen=True)
class DaemonConfig:
    """What RMD reads from ``rmd.toml`` and its flags; paths lie under ``root`` (the container's files)."""

    address: str = "localhost"
    tlsport: int = 8443
    certpath: Path = Path("/usr/local/etc/rmd/cert/server")
    clientcapath: Path = Path("/usr/local/etc/rmd/cert/client")
    clientauth: str = "challenge"
    debug: bool = False
    debugport: int = 8081
    acl: Acl = Acl()
    source: str = "built-in defaults"


def load_config(conf_dir: Path | None, root: Path = Path("/")) -> DaemonConfig:
    """``rmd.toml`` from ``conf_dir`` (else RMD's default directories), its paths placed under ``root``."""

    def under(path: str) -> Path:
        return root / path.lstrip("/")

    dirs = ([str(conf_dir)] if conf_dir is not None else []) + list(_DEFAULT_CONF_DIRS)
    found = next((under(d) / "rmd.toml" for d in dirs if (under(d) / "rmd.toml").is_file()), None)
    if found is None:
        return DaemonConfig()
    try:
        doc = tomllib.loads(found.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{found}: {exc}") from exc
    default, debug, acl = (doc.get(k) or {} for k in ("default", "debug", "acl"))
    authorization = str(acl.get("authorization", "signature")).lower()
    if authorization not in ("signature", "role", "username"):
        authorization = "signature"  # RMD keeps its default for an unknown value
    base = DaemonConfig()
    return DaemonConfig(
        address=str(default.get("address", base.address)),
        tlsport=int(default.get("tlsport", base.tlsport)),
        certpath=under(str(default.get("certpath", base.certpath))),
        clientcapath=under(str(default.get("clientcapath", base.clientcapath))),
        clientauth=str(default.get("clientauth", base.clientauth)),
        debug=bool(debug.get("enabled", False)),
        debugport=int(debug.get("debugport", base.debugport)),
        acl=Acl(
            authorization,
            under(str(acl["admincert"])) if acl.get("admincert") else None,
            under(str(acl["usercert"])) if acl.get("usercert") else None,
        ),
        source=str(found),
    )


VolumeSources = Mapping[tuple[str, str], Mapping[str, bytes]]  # ("configMap"|"secret", name) → key → data


def lay_out_container(
    pod_spec: Mapping[str, Any], container: str, sources: VolumeSources, root: Path
) -> list[str]:
    """Place what the kubelet would mount into ``container`` under ``root`` (ConfigMap and Secret items,
    empty directories; host paths are left out) and return the container's arguments after its binary.

    This runs the RMD DaemonSet's container as written: ``main(["--root", root, *arguments])``. Called
    again, it replaces the files, as the kubelet updates a mounted Secret in place.
    """
    volumes = {str(v.get("name")): v for v in pod_spec.get("volumes") or ()}
    (spec,) = [c for c in pod_spec.get("containers") or () if c.get("name") == container]
    for mount in spec.get("volumeMounts") or ():
        volume = volumes[str(mount["name"])]
        target = root / str(mount["mountPath"]).lstrip("/")
        kind = next((k for k in ("configMap", "secret", "emptyDir") if k in volume), None)
        if kind is None:
            continue
        target.mkdir(parents=True, exist_ok=True)
        if kind == "emptyDir":
            continue
        ref = volume[kind]
        name = str(ref.get("name") or ref.get("secretName"))
        optional = bool(ref.get("optional"))
        data = sources.get((kind, name), {}) if optional else sources[(kind, name)]
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        written = set()
        for item in items:
            if optional and str(item["key"]) not in data:
                continue  # the kubelet skips an optional source's missing keys
            path = (target / str(item["path"])).resolve()
            if not path.is_relative_to(target.resolve()):
                raise ValueError(f"volume {mount['name']}: item path {item['path']!r} leaves {target}")
            path.parent.mkdir(parents=True, exist_ok=True)
            # Replaced whole, never truncated: a reader sees the old file or the new one.
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data[str(item["key"])])
            tmp.replace(path)
            written.add(path)
        for stale in target.iterdir():  # laid out again: only the source's current keys remain
            if stale.is_file() and stale.resolve() not in written:
                stale.unlink()
    return [*list(spec.get("command") or ())[1:], *list(spec.get("args") or ())]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Simulated RMD (v0.3 REST API), with RMD's flags.")
    # RMD's flags: given ones win over rmd.toml, as RMD binds them over its configuration.
    p.add_argument("--conf-dir", type=Path, help="directory of rmd.toml")
    p.add_argument("--address")
    p.add_argument("--tlsport", type=int)
    p.add_argument("--clientauth", choices=["challenge", "require"])
    p.add_argument("-d", "--debug", action="store_true", default=None, help="plain HTTP without ACL")
    p.add_argument("--debugport", type=int)
    # The simulator's own.
    p.add_argument("--root", type=Path, default=Path("/"), help="file system holding rmd.toml's paths")
    p.add_argument("--sockets", type=int, default=2)
    p.add_argument("--cpus-per-socket", type=int, default=16)
    p.add_argument("--count", type=int, default=1, help="independent RMDs, one per node (ports from 0)")
    p.add_argument("--urls-file", type=Path, help="write the RMDs' base URLs here, one a line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        cfg = load_config(args.conf_dir, args.root)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    overrides = {
        k: v
        for k, v in vars(args).items()
        if k in ("address", "tlsport", "clientauth", "debug", "debugport") and v is not None
    }
    cfg = dataclasses.replace(cfg, **overrides)
    log.info("configuration: %s; ACL %s", cfg.source, cfg.acl)
    tls: ssl.SSLContext | None = None
    if not cfg.debug:
        try:
            tls = server_tls(
                cfg.clientcapath / "ca.pem",
                cfg.certpath / "rmd-cert.pem",
                cfg.certpath / "rmd-key.pem",
                cfg.clientauth,
            )
        except (OSError, ssl.SSLError) as exc:
            log.error("TLS files under %s and %s: %s", cfg.certpath, cfg.clientcapath, exc)
            return 2
    # RMD checks certificates only under ``challenge``; ``require`` passes every request on.
    acl = cfg.acl if cfg.clientauth == "challenge" else None
    host = "127.0.0.1" if cfg.address == "localhost" else cfg.address
    port = cfg.debugport if cfg.debug else cfg.tlsport
    machine = Machine(sockets=args.sockets, cpus_per_socket=args.cpus_per_socket)

    async def run() -> None:
        async with contextlib.AsyncExitStack() as stack:
            urls = []
            for i in range(args.count):
                url = await stack.enter_async_context(
                    serve_rmd(RmdState(machine), host, port if args.count == 1 else 0, tls, acl)
                )
                urls.append(url)
                log.info("simulated RMD %d on %s", i, url)
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
