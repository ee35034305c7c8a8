"""The prepared claims on disk, so a restarted driver (or the next instance in a rolling update) can
answer a repeated prepare identically and unprepare what an earlier process prepared.

One file per driver, ``<plugins dir>/<driver>/checkpoint.json``, in JSON lines: a header naming the
version and the driver, then records, each one line: ``{"prepared": {...claim...}}`` or
``{"unprepared": "<uid>"}``; the last record for a UID wins. A change appends its records in one
``write`` and, where the prepared state outlives the machine (``sync_appends``), ``fdatasync``s before
the call is answered: a tenth of what rewriting the file (temporary file, fsync, rename) costs on a
journalling file system, where the rename waits for the data. When
records outnumber the claims (more than twice, plus 64), the file is rewritten whole and atomically
(temporary file, fsync, rename, as the kubelet's own checkpoint store writes), so it stays bounded.

A power cut during an append leaves a last line without its newline: that record was never answered
as done, so it is ignored, and the next change rewrites the file first. Other damage (a bad header, a
line of garbage or NUL bytes, a record with a bad field, an empty file) never stops a driver: every
line that can be read is kept, every other one is logged once naming the file and the line, and the
next change rewrites the file whole, keeping the damaged one beside it as ``checkpoint.json.damaged``.
A claim whose record was lost is still unprepared, by its spec file's name. A checkpoint that cannot
be read or written at all (a directory in its place, a read-only file system) is a
:class:`CheckpointError` naming the path, for each call that needs it.

Two instances of a driver run side by side during a rolling update and share the file: every change
happens under an exclusive ``flock`` on a lock file beside it, and a process re-reads the file whenever
its identity (inode, size, change time) is not what it last saw. ``encode``/``decode`` are pure;
:class:`Checkpoint` is the only part that touches the disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from intel_device_plugins.dra.model import ClaimRef, PreparedClaim, PreparedDevice

VERSION = 1
FILE_NAME = "checkpoint.json"
LOCK_NAME = "checkpoint.lock"
DAMAGED_SUFFIX = ".damaged"
MAX_PROBLEMS_LOGGED = 20
MAX_BYTES = 16 * 1024 * 1024
"""Far above what a node's prepared claims take (about 300 bytes each); a bound on what is read."""


log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message names the file and what is wrong."""


def _claim_entry(claim: PreparedClaim) -> dict[str, Any]:
    return {
        "uid": claim.claim.uid,
        "namespace": claim.claim.namespace,
        "name": claim.claim.name,
        "devices": [
            {
                "requests": list(device.requests),
                "pool": device.pool,
                "device": device.device,
                "cdiDeviceIDs": list(device.cdi_device_ids),
                **({"shareID": device.share_id} if device.share_id is not None else {}),
            }
            for device in claim.devices
        ],
        "cdiSpecFiles": list(claim.cdi_spec_files),
    }


def _line(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n"


def encode_records(before: Mapping[str, PreparedClaim], after: Mapping[str, PreparedClaim]) -> bytes:
    """The records that turn ``before`` into ``after``: nothing when they are equal."""
    lines = [_line({"unprepared": uid}) for uid in before if uid not in after]
    # ``is`` first: the unchanged claims are the same objects, and comparing each of a thousand claims
    # field by field on every change made a burst of prepares quadratic.
    lines += [
        _line({"prepared": _claim_entry(claim)})
        for uid, claim in after.items()
        if before.get(uid) is not claim and before.get(uid) != claim
    ]
    return b"".join(lines)


def encode(driver: str, claims: Mapping[str, PreparedClaim]) -> bytes:
    """A whole file: the header and one record per claim; deterministic for a given mapping."""
    return _line({"version": VERSION, "driver": driver}) + encode_records({}, claims)


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CheckpointError(f"{where} is not a list of strings")
    return tuple(value)


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise CheckpointError(f"{where} is not a string")
    return value


def _claim(uid: str, entry: Any, where: str) -> PreparedClaim:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where} is not an object")
    devices = entry.get("devices")
    if not isinstance(devices, list):
        raise CheckpointError(f"{where}.devices is not a list")
    prepared: list[PreparedDevice] = []
    for index, device in enumerate(devices):
        at = f"{where}.devices[{index}]"
        if not isinstance(device, dict):
            raise CheckpointError(f"{at} is not an object")
        share_id = device.get("shareID")
        prepared.append(
            PreparedDevice(
                requests=_strings(device.get("requests"), f"{at}.requests"),
                pool=_string(device.get("pool"), f"{at}.pool"),
                device=_string(device.get("device"), f"{at}.device"),
                cdi_device_ids=_strings(device.get("cdiDeviceIDs"), f"{at}.cdiDeviceIDs"),
                share_id=None if share_id is None else _string(share_id, f"{at}.shareID"),
            )
        )
    files = _strings(entry.get("cdiSpecFiles", []), f"{where}.cdiSpecFiles")
    for name in files:
        # Unprepare deletes these: a name with a path in it would reach outside the CDI directory.
        if not name or "/" in name or name.startswith("."):
            raise CheckpointError(f"{where}.cdiSpecFiles: {name!r} is not a plain file name")
    return PreparedClaim(
        claim=ClaimRef(
            namespace=_string(entry.get("namespace"), f"{where}.namespace"),
            name=_string(entry.get("name"), f"{where}.name"),
            uid=uid,
        ),
        devices=tuple(prepared),
        cdi_spec_files=files,
    )


@dataclass(frozen=True)
class Decoded:
    """A file's claims, how many records it holds, whether its last line was cut short, and what in it
    could not be read (each naming the file and the line)."""

    claims: dict[str, PreparedClaim]
    records: int
    torn: bool
    problems: tuple[str, ...] = ()


def _record(line: bytes, where: str) -> Any:
    try:
        return json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{where} is not valid JSON: {error}") from error


def _is_record(record: Any) -> bool:
    return isinstance(record, dict) and ("unprepared" in record or "prepared" in record)


def _header_problems(header: dict[str, Any], where: str, driver: str) -> list[str]:
    problems = []
    if header.get("version") != VERSION:
        problems.append(
            f"{where}: version {header.get('version')!r}; this driver writes {VERSION} and keeps the "
            "records it can read"
        )
    if header.get("driver") != driver:
        problems.append(f"{where}: written by driver {header.get('driver')!r}, not {driver!r}")
    return problems


def _apply(claims: dict[str, PreparedClaim], record: Any, where: str) -> None:
    if isinstance(record, dict) and "unprepared" in record:
        claims.pop(_string(record["unprepared"], f"{where}: unprepared"), None)
    elif isinstance(record, dict) and isinstance(record.get("prepared"), dict):
        entry = record["prepared"]
        uid = _string(entry.get("uid"), f"{where}: prepared.uid")
        claims[uid] = _claim(uid, entry, f"{where}: prepared")
    else:
        raise CheckpointError(f"{where} is neither a prepared nor an unprepared record")


def decode_file(data: bytes, source: str, driver: str) -> Decoded:
    """The claims in a checkpoint's bytes, as many as can be read: never raises.

    A line that cannot be read (not JSON, not a record, a field of the wrong type) is skipped and named
    in ``problems`` with ``source`` and its line number, and so is a damaged or missing header: a driver
    must start on any checkpoint, and a claim whose record was lost is still unprepared by its spec
    file's name. A last line without its newline is an append cut short by a power cut.
    """
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # a final line without its newline: an append cut short
    complete = lines[:-1]
    claims: dict[str, PreparedClaim] = {}
    problems: list[str] = []
    if not data:
        problems.append(f"checkpoint {source} line 1: the file is empty")
    for number, line in enumerate(complete, start=1):
        where = f"checkpoint {source} line {number}"
        try:
            record = _record(line, where)
            if number == 1 and not _is_record(record):
                if not isinstance(record, dict) or "version" not in record:
                    raise CheckpointError(f"{where} is neither a header nor a record")
                problems += _header_problems(record, where, driver)
                continue
            if number == 1:
                problems.append(f"{where}: no header; the records are read")
            _apply(claims, record, where)
        except CheckpointError as error:
            problems.append(f"{error}; the line is skipped")
    if torn:
        problems.append(
            f"checkpoint {source} line {len(complete) + 1} is cut short (a write that did not finish); "
            "the line is skipped"
        )
    return Decoded(claims, max(0, len(complete) - 1), torn, tuple(problems))


def decode(data: bytes, source: str, driver: str) -> dict[str, PreparedClaim]:
    """The claims in a checkpoint's bytes, strictly: :class:`CheckpointError` with the first problem."""
    decoded = decode_file(data, source, driver)
    if decoded.problems:
        raise CheckpointError(decoded.problems[0])
    return decoded.claims


Identity = tuple[int, int, int, int]
"""inode, size, modification and change time (ns): a file nobody touched keeps all four."""


@dataclass(frozen=True)
class _Seen:
    identity: Identity
    decoded: Decoded


def compaction_due(records: int, claims: int) -> bool:
    """Rewrite the file once records outnumber the claims they describe by this much."""
    return records > 2 * claims + 64


class Checkpoint:
    """The checkpoint file of one driver. Reads and writes block briefly; callers run them inline."""

    def __init__(self, path: Path, driver: str, *, sync_appends: bool = True) -> None:
        self.path = path
        self.driver = driver
        self.sync_appends = sync_appends
        """``False`` where what the records describe does not outlive the machine (CDI specs on a tmpfs):
        a record then only has to outlive the driver process, which the page cache sees to."""
        self._seen: _Seen | None = None
        self.problems: tuple[str, ...] = ()
        """What the last read of the file could not read (logged once per version of the file)."""

    @classmethod
    def for_driver(cls, plugins_dir: Path, driver: str, *, sync_appends: bool = True) -> Checkpoint:
        """``<plugins dir>/<driver>/checkpoint.json``, the directory the kubelet gives the driver."""
        return cls(plugins_dir / driver / FILE_NAME, driver, sync_appends=sync_appends)

    def _identity(self, fd: int | None = None) -> Identity | None:
        try:
            info = os.fstat(fd) if fd is not None else os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {error.strerror}") from error
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def _read(self) -> Decoded | None:
        identity = self._identity()
        if identity is None:
            self._seen, self.problems = None, ()
            return None
        if self._seen is not None and self._seen.identity == identity:
            return self._seen.decoded
        try:
            with open(self.path, "rb") as file:
                data = file.read(MAX_BYTES + 1)
                identity = self._identity(file.fileno())
        except FileNotFoundError:
            self._seen, self.problems = None, ()
            return None
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {error.strerror}") from error
        decoded = decode_file(data[:MAX_BYTES], os.fspath(self.path), self.driver)
        if len(data) > MAX_BYTES:
            problem = f"checkpoint {self.path} is larger than {MAX_BYTES} bytes; the rest is not read"
            decoded = replace(decoded, problems=(problem, *decoded.problems))
        if decoded.problems != self.problems:  # once per damage, not on every read
            _log_problems(decoded)
        self.problems = decoded.problems
        if identity is not None and identity[1] == len(data):  # not appended to while being read
            self._seen = _Seen(identity, decoded)
        return decoded

    def load(self) -> dict[str, PreparedClaim]:
        """The claims on disk; none when there is no file yet."""
        decoded = self._read()
        return {} if decoded is None else dict(decoded.claims)

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file with ``claims``, atomically (the compacted form)."""
        content = encode(self.driver, claims)
        directory = self.path.parent
        temporary = directory / f".{self.path.name}.{os.urandom(4).hex()}.tmp"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o750)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise CheckpointError(f"cannot write checkpoint {self.path}: {error.strerror}") from error
        identity = self._identity()  # after the rename, which may touch the change time
        self._seen = None if identity is None else _Seen(identity, Decoded(dict(claims), len(claims), False))
        self.problems = ()

    def _append(self, seen: Decoded, after: dict[str, PreparedClaim], records: bytes) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            try:
                _write_all(fd, records)
                if self.sync_appends:
                    os.fdatasync(fd)
                identity = self._identity(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {error.strerror}") from error
        count = seen.records + records.count(b"\n")
        self._seen = None if identity is None else _Seen(identity, Decoded(after, count, False))

    def _keep_damaged(self) -> None:
        """Keep the damaged file as ``checkpoint.json.damaged`` (the last one only) before the next change
        replaces it: what could not be read may still be worth a look."""
        damaged = self.path.with_name(self.path.name + DAMAGED_SUFFIX)
        link = self.path.with_name(f".{self.path.name}.{os.urandom(4).hex()}.damaged")
        try:
            os.link(self.path, link)
            os.replace(link, damaged)
        except OSError as error:
            with contextlib.suppress(OSError):
                link.unlink(missing_ok=True)
            log.warning("cannot keep the damaged checkpoint as %s: %s", damaged, error.strerror)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.path.parent / LOCK_NAME
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise CheckpointError(f"cannot open checkpoint lock {lock}: {error.strerror}") from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def update(
        self, change: Callable[[dict[str, PreparedClaim]], dict[str, PreparedClaim] | None]
    ) -> dict[str, PreparedClaim]:
        """Read, apply ``change`` and record the difference under the lock; the claims now on disk.

        ``change`` edits the mapping in place or returns a new one. Nothing is written when the claims
        did not change, so a repeated unprepare costs no disk write.
        """
        with self._locked():
            seen = self._read()
            before = {} if seen is None else seen.claims
            after = dict(before)
            replaced = change(after)
            if replaced is not None:
                after = replaced
            if after == before:
                return after
            records = encode_records(before, after)
            if seen is not None and seen.problems:
                self._keep_damaged()
            if (
                seen is None
                or seen.torn
                or seen.problems
                or compaction_due(seen.records + records.count(b"\n"), len(after))
            ):
                self.save(after)
            else:
                self._append(seen, after, records)
            return dict(after)


def _log_problems(decoded: Decoded) -> None:
    """Warnings, but for a last line cut short: a power cut leaves one, and so does a read (without the
    lock) that meets the other instance's append half-way; it is only information."""
    problems = decoded.problems
    for index, problem in enumerate(problems[:MAX_PROBLEMS_LOGGED]):
        cut_short = decoded.torn and index == len(problems) - 1
        log.log(logging.INFO if cut_short else logging.WARNING, "%s", problem)
    if len(problems) > MAX_PROBLEMS_LOGGED:
        log.warning("and %d more lines of the checkpoint cannot be read", len(problems) - MAX_PROBLEMS_LOGGED)


def forget_vanished(claims: dict[str, PreparedClaim], cdi_dir: Path) -> dict[str, PreparedClaim]:
    """The claims whose CDI spec files still exist; a claim that wrote none had no device of the driver
    and nothing to undo, so it goes too.

    Run when a driver starts: a claim whose specs are gone was prepared before the machine restarted
    (the specs lived on a tmpfs) or its specs were removed by hand; either way nothing of it is left to
    undo, and the kubelet prepares it afresh if a pod still needs it. Without this, an unprepare
    record lost with the machine would keep its claim in the file for good.
    """
    return {
        uid: claim
        for uid, claim in claims.items()
        if any((cdi_dir / name).exists() for name in claim.cdi_spec_files)
    }


VOLATILE_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs"})


def file_system_type(path: Path, mountinfo: str) -> str | None:
    """The type of the file system ``path`` (absolute, resolved) is on, from ``/proc/self/mountinfo`` text."""
    best, best_type = "", None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = fields[4].replace("\\040", " ")
        fs_type = line.split(" - ", 1)[1].split(" ", 1)[0]
        inside = (
            mount_point == "/"
            or os.fspath(path) == mount_point
            or os.fspath(path).startswith(mount_point + "/")
        )
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fs_type
    return best_type


def is_volatile(directory: Path) -> bool:
    """``directory`` (or, while it does not exist yet, its nearest existing parent) is on a tmpfs/ramfs."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False  # unknown: treat as persistent, the safe side
    return file_system_type(Path(os.path.realpath(directory)), mountinfo) in VOLATILE_FILE_SYSTEMS


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
