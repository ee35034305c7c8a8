"""Registration with the kubelet's plugin watcher, and the two sockets a DRA driver listens on.

The kubelet watches its registry directory for sockets, calls ``GetInfo`` on each new one, connects to
the endpoint it names and calls ``NotifyRegistrationStatus``. A DRA driver names its services in
``supported_versions`` as ``<gRPC package>.<service>``: the kubelet picks the DRA API version and
whether (and in which version) to open the health stream from that list alone.

Rolling update, as Kubernetes' Go helper does it: each instance's socket names carry its own UID (the
pod UID), ``<registry>/<driver>-<uid>-reg.sock`` and ``<plugins>/<driver>/dra-<uid>.sock``, so a new
instance registers beside the old one and the kubelet uses whichever is there. The registration name
falls back to shorter hashed forms, the same as the Go helper's, when the path would not fit a unix
socket address (108 bytes). Each instance removes its own sockets, and only those, when it stops.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.kubeletapi import pluginregistration_v1 as reg
from intel_device_plugins.kubeletapi.rpc import Handlers, UnixServer, unary

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
"""What this framework serves, newest first: a 1.37 kubelet opens the v1 health stream, 1.36 v1alpha1."""
UNIX_PATH_MAX = 108
_UID_HASH_BYTES = 8
_DRIVER_UID_HASH_BYTES = 16
INSTANCE_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,127}$")
"""A pod UID (a UUID); it becomes part of socket names, so nothing else is accepted."""


class RegistrationError(ValueError):
    """Socket paths that cannot be used; the message names the flag or value."""


def _hash(text: str, size: int) -> str:
    # Imported here: only a name too long for a socket path needs it, and hashlib loads OpenSSL's
    # digests (about 0.6 MiB resident) that a driver never needs otherwise.
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:size]).decode().rstrip("=")


def registrar_socket_name(registry_dir: Path, driver: str, instance_uid: str) -> str:
    """The registration socket's file name: ``<driver>-reg.sock`` without an instance UID; with one,
    the first of ``<driver>-<uid>-reg.sock``, ``<driver>-<hash(uid)>-reg.sock`` and
    ``dra-<hash(driver, uid)>-reg.sock`` whose full path fits a socket address (the Go helper's order)."""
    if not instance_uid:
        return f"{driver}-reg.sock"
    candidates: tuple[Callable[[], str], ...] = (
        lambda: f"{driver}-{instance_uid}-reg.sock",
        lambda: f"{driver}-{_hash(instance_uid, _UID_HASH_BYTES)}-reg.sock",
        lambda: f"dra-{_hash(driver + chr(0) + instance_uid, _DRIVER_UID_HASH_BYTES)}-reg.sock",
    )
    for candidate in candidates:
        name = candidate()
        if len(os.fspath(registry_dir / name)) <= UNIX_PATH_MAX:
            return name
    return name


@dataclass(frozen=True)
class SocketPaths:
    """Where one driver instance listens: the kubelet's registry, and its own DRA service socket."""

    registrar: Path
    plugin: Path

    @classmethod
    def for_instance(
        cls, registry_dir: Path, plugins_dir: Path, driver: str, instance_uid: str = ""
    ) -> SocketPaths:
        if instance_uid and not INSTANCE_UID.match(instance_uid):
            raise RegistrationError(f"instance UID {instance_uid!r} is not a UID")
        if not driver or "/" in driver or driver.startswith("."):
            raise RegistrationError(f"driver name {driver!r} cannot name a directory")
        suffix = f"-{instance_uid}" if instance_uid else ""
        paths = cls(
            registrar=registry_dir / registrar_socket_name(registry_dir, driver, instance_uid),
            plugin=plugins_dir / driver / f"dra{suffix}.sock",
        )
        if len(os.fspath(paths.plugin)) > UNIX_PATH_MAX:
            raise RegistrationError(
                f"DRA socket {paths.plugin} is longer than {UNIX_PATH_MAX} bytes; use a shorter "
                "-kubelet-plugins-directory-path"
            )
        return paths


def live_sockets(plugins_dir: Path, driver: str) -> list[Path]:
    """The DRA sockets of ``driver`` in its plugin directory that something answers on.

    A driver stopping in a rolling update asks this after removing its own: when its successor
    serves, the node's slices are the successor's too and must stay. A socket left by a killed
    instance refuses the connection and does not count.
    """
    live = []
    for path in sorted((plugins_dir / driver).glob("dra*.sock")):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect(os.fspath(path))
            except OSError:
                continue
        live.append(path)
    return live


@dataclass(frozen=True)
class RegistrationStatus:
    """What the kubelet last said about the registration."""

    registered: bool
    error: str = ""


REGISTRATION_SERVICE = reg.Registration.NAME


class RegistrationService:
    """``GetInfo`` names the driver and its endpoint; ``NotifyRegistrationStatus`` is recorded and
    logged, and ``on_status`` (if given) hears it, so the driver can tell when the kubelet took it.
    Messages are the generated codecs of :mod:`intel_device_plugins.kubeletapi` (no protobuf runtime)."""

    def __init__(
        self,
        driver: str,
        endpoint: Path,
        supported_services: tuple[str, ...] = SUPPORTED_SERVICES,
        on_status: Callable[[RegistrationStatus], None] | None = None,
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.supported_services = supported_services
        self.statuses: list[RegistrationStatus] = []
        self._on_status = on_status

    async def GetInfo(self, request: reg.InfoRequest) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=os.fspath(self.endpoint),
            supported_versions=tuple(self.supported_services),
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus
    ) -> reg.RegistrationStatusResponse:
        status = RegistrationStatus(registered=request.plugin_registered, error=request.error)
        # The kubelet calls this once per registration; keeping the last few is enough to diagnose.
        self.statuses = [*self.statuses[-9:], status]
        if status.registered:
            log.info("kubelet registered DRA driver %s at %s", self.driver, self.endpoint)
        else:
            log.error("kubelet refused DRA driver %s: %s", self.driver, status.error)
        if self._on_status is not None:
            self._on_status(status)
        return reg.RegistrationStatusResponse()

    def handlers(self) -> Handlers:
        return dict(
            [
                unary(reg.Registration.GetInfo, self.GetInfo),
                unary(reg.Registration.NotifyRegistrationStatus, self.NotifyRegistrationStatus),
            ]
        )


class DriverSockets:
    """The DRA service server and then the registration server, started in that order so the kubelet
    never finds a registration whose endpoint is not listening yet; stopped in the reverse order."""

    def __init__(
        self,
        paths: SocketPaths,
        driver: str,
        services: Handlers,
        on_status: Callable[[RegistrationStatus], None] | None = None,
    ) -> None:
        self.paths = paths
        self.registration = RegistrationService(driver, paths.plugin, on_status=on_status)
        self._services = services
        self._servers: list[UnixServer] = []

    async def start(self) -> None:
        try:
            for path, handlers in (
                (self.paths.plugin, self._services),
                (self.paths.registrar, self.registration.handlers()),
            ):
                server = UnixServer(path, handlers)
                await server.start()
                self._servers.append(server)
        except BaseException:
            await self.stop()
            raise

    async def stop(self, grace: float = 1.0) -> None:
        """Stop serving and remove this instance's own sockets (the registration one first: the kubelet
        then drops the registration and stops calling)."""
        while self._servers:
            await self._servers.pop().stop(grace)
