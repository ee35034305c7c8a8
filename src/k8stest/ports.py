"""TCP ports for the processes the test tier starts, reserved so that nothing else can take them.

Why not "bind port 0, read the number, close": the kernel hands out port 0 from its ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), the same range every outgoing connection takes its
local port from. Between closing the probe and the component's own bind, any client socket on the
machine (a kubectl, a watch, a webhook call) may be given that port, and the component then fails
with "address already in use". A port from outside the ephemeral range is never given to an outgoing
connection, so only a deliberate bind can take it.

Why a lock file per port: two users of the pool at once (two pytest processes, CI and a developer)
must never hand out the same port. Each reservation holds an exclusive ``flock`` on
``<lock dir>/<port>.lock`` through an open descriptor; the kernel drops it when the holder releases
it or exits, however it exits, so a killed session leaves no stale reservation. A bind check then
skips ports that something outside the pool (another program, a component still shutting down)
holds.

A :class:`ReservedPort` is owned like a process: whoever starts the component keeps the reservation
and releases it once the component has stopped. One that is never released stays reserved until the
process exits (the descriptor is a plain file descriptor, not closed by garbage collection), which is
the safe direction.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Below the kernel's default ephemeral range (32768-60999) and below kube-apiserver's default
# NodePort range (30000-32767).
PREFERRED_POOL = range(20000, 30000)
# Ports our components listen on when started without a port flag (etcd, kube-apiserver, KCM,
# scheduler, kubelet, kube-proxy, the operator's and webhooks' metrics, health and webhook servers,
# RMD). No pool hands them out, whatever range it is given.
DEFAULT_COMPONENT_PORTS = frozenset(
    {2379, 2380, 6443, 8080, 8081, 8443, 9443, 10248, 10249, 10250, 10255, 10256, 10257, 10259}
)
POOL_ENV = "K8STEST_PORT_RANGE"
LOCK_DIR_ENV = "K8STEST_PORT_LOCK_DIR"


class PortsExhausted(RuntimeError):
    """Every port of the pool is reserved or in use."""


def parse_port_range(text: str, source: str) -> range:
    """``"20000 29999"`` or ``"20000-29999"`` (both inclusive) -> ``range(20000, 30000)``."""
    words = text.replace("-", " ").split()
    if len(words) != 2 or not all(w.isdigit() for w in words):
        raise ValueError(f"{source}: expected two port numbers, got {text.strip()!r}")
    first, last = int(words[0]), int(words[1])
    if not 0 < first <= last < 65536:
        raise ValueError(f"{source}: {first}-{last} is not a range of TCP ports")
    return range(first, last + 1)


def outside(candidates: range, ephemeral: range) -> range:
    """The larger part of ``candidates`` that lies below or above the ephemeral range."""
    below = range(candidates.start, min(candidates.stop, ephemeral.start))
    above = range(max(candidates.start, ephemeral.stop), candidates.stop)
    return below if len(below) >= len(above) else above


def pool_ports(pool: range, avoid: frozenset[int] = DEFAULT_COMPONENT_PORTS) -> tuple[int, ...]:
    """``pool`` without privileged ports and without ``avoid``."""
    return tuple(p for p in pool if p >= 1024 and p not in avoid)


def default_pool(environ: Mapping[str, str], ephemeral_text: str) -> tuple[int, ...]:
    """The pool for this machine: ``$K8STEST_PORT_RANGE`` if set, else :data:`PREFERRED_POOL`; in
    either case without the kernel's ephemeral range (``ephemeral_text`` is the content of
    :data:`EPHEMERAL_RANGE_FILE`)."""
    ephemeral = parse_port_range(ephemeral_text, str(EPHEMERAL_RANGE_FILE))
    if POOL_ENV in environ:
        wanted = parse_port_range(environ[POOL_ENV], POOL_ENV)
        if wanted.start < ephemeral.stop and ephemeral.start < wanted.stop:
            raise ValueError(
                f"{POOL_ENV}={environ[POOL_ENV]} overlaps the kernel's ephemeral range "
                f"{ephemeral.start}-{ephemeral.stop - 1} ({EPHEMERAL_RANGE_FILE}); outgoing connections "
                "take ports from there"
            )
    else:
        wanted = outside(PREFERRED_POOL, ephemeral)
    ports = pool_ports(wanted)
    if not ports:
        raise ValueError(
            f"no port of {PREFERRED_POOL.start}-{PREFERRED_POOL.stop - 1} lies outside the kernel's "
            f"ephemeral range {ephemeral.start}-{ephemeral.stop - 1} ({EPHEMERAL_RANGE_FILE}): set "
            f"{POOL_ENV}=FIRST-LAST to a range outside it"
        )
    return ports


def default_lock_dir(environ: Mapping[str, str]) -> Path:
    """Shared by every user of the machine, so that two users' sessions cannot collide either."""
    return Path(environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "k8stest-ports")


def _ensure_lock_dir(path: Path) -> None:
    """A directory anyone may add lock files to (sticky, like /tmp); never a symlink."""
    try:
        path.mkdir(mode=0o1777)
        os.chmod(path, 0o1777)  # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise RuntimeError(f"{path}: port lock directory is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise RuntimeError(f"{path}: port lock directory is not writable by us; set {LOCK_DIR_ENV}")


def port_is_bindable(port: int) -> bool:
    """Whether a listener could bind ``port`` on every IPv4 and IPv6 address now.

    No SO_REUSEADDR: a port with connections still in TIME_WAIT counts as taken, which errs on the
    safe side. A machine without IPv6 is checked on IPv4 only.
    """
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            if family == socket.AF_INET6:
                continue
            raise
        with sock:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return False
                if family == socket.AF_INET6 and e.errno == errno.EADDRNOTAVAIL:
                    continue
                raise
    return True


class ReservedPort:
    """One port held for its owner: an exclusive lock on the port's lock file until :meth:`release`."""

    def __init__(self, port: int, lock_fd: int, lock_path: Path) -> None:
        self.port = port
        self.lock_path = lock_path
        self._fd: int | None = lock_fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the port back to the pool; call once whatever listened on it has stopped. Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ReservedPort:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ReservedPort({self.port}, held={self.held})"


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding ``path``'s exclusive lock, or None if another holder has it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except PermissionError:  # another user's lock file we may not open: theirs
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def reserve_port(*, pool: Sequence[int] | None = None, lock_dir: Path | None = None) -> ReservedPort:
    """A port of ``pool`` (default: :func:`default_pool`) that no other reservation holds and that
    nothing listens on; held until :meth:`ReservedPort.release` or the end of this process.

    The search starts at an offset taken from the process ID, so that parallel sessions mostly try
    different ports first; the locks, not the offset, are what keep them apart.
    """
    if pool is None:
        pool = default_pool(os.environ, EPHEMERAL_RANGE_FILE.read_text())
    directory = lock_dir if lock_dir is not None else default_lock_dir(os.environ)
    _ensure_lock_dir(directory)
    if not pool:
        raise PortsExhausted("the port pool is empty")
    start = os.getpid() % len(pool)
    locked = busy = 0
    for port in (*pool[start:], *pool[:start]):
        path = directory / f"{port}.lock"
        fd = _try_lock(path)
        if fd is None:
            locked += 1
            continue
        try:
            free = port_is_bindable(port)
        except BaseException:
            os.close(fd)
            raise
        if free:
            return ReservedPort(port, fd, path)
        os.close(fd)
        busy += 1
    raise PortsExhausted(
        f"no free port among the {len(pool)} of the pool {min(pool)}-{max(pool)}: {locked} reserved "
        f"(lock files in {directory}), {busy} in use by other programs; release ports when their "
        f"component stops, or widen the pool with {POOL_ENV}=FIRST-LAST"
    )


def reserve_ports(
    count: int, *, pool: Sequence[int] | None = None, lock_dir: Path | None = None
) -> list[ReservedPort]:
    """``count`` distinct reservations, or none: on failure those already made are released."""
    made: list[ReservedPort] = []
    try:
        for _ in range(count):
            made.append(reserve_port(pool=pool, lock_dir=lock_dir))
    except BaseException:
        release_all(made)
        raise
    return made


def release_all(reservations: Sequence[ReservedPort]) -> None:
    for reservation in reservations:
        reservation.release()


@contextlib.contextmanager
def reserved_ports(count: int) -> Iterator[list[int]]:
    """``count`` port numbers for the block; released when it ends, however it ends."""
    made = reserve_ports(count)
    try:
        yield [r.port for r in made]
    finally:
        release_all(made)
