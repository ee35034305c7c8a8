"""The prepared claims on disk, so a restarted driver (or the next instance in a rolling update) can
answer a repeated prepare identically and unprepare what an earlier process prepared.

One JSON file per driver, ``<plugins dir>/<driver>/checkpoint.json``, claims keyed by UID. Writes are
atomic (temporary file, fsync, rename: what the kubelet's own checkpoint store does), so a crash leaves
the old or the new file, never half of one. The directory is not fsynced: a power cut may then bring
back the previous file, which is whole, and what a lost entry described (a spec under the CDI root,
a tmpfs) is gone with the reboot too. Two instances of a driver run side by side during a rolling
update and share the file: every change is a read-modify-write under an exclusive ``flock`` on a lock
file beside it. What was read or written last is kept with the file's identity (inode, size, change
time), so a file nobody else changed is not parsed again.
``encode``/``decode`` are pure; :class:`Checkpoint` is the only part that touches the disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from intel_device_plugins.dra.model import ClaimRef, PreparedClaim, PreparedDevice

VERSION = 1
FILE_NAME = "checkpoint.json"
LOCK_NAME = "checkpoint.lock"
MAX_BYTES = 16 * 1024 * 1024
"""Far above what a node's prepared claims take (about 300 bytes each); a bound on what is read."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message names the file and what is wrong."""


def encode(driver: str, claims: Mapping[str, PreparedClaim]) -> bytes:
    """The file's content: deterministic (sorted keys), so an unchanged state gives identical bytes."""
    document = {
        "version": VERSION,
        "driver": driver,
        "claims": {
            uid: {
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
            for uid, claim in claims.items()
        },
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


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


def decode(data: bytes, source: str, driver: str) -> dict[str, PreparedClaim]:
    """The claims in a checkpoint's bytes; :class:`CheckpointError` naming ``source`` and the field."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {source} is not valid JSON: {error}") from error
    if not isinstance(document, dict):
        raise CheckpointError(f"checkpoint {source} is not a JSON object")
    version = document.get("version")
    if version != VERSION:
        raise CheckpointError(f"checkpoint {source} has version {version!r}; this driver reads {VERSION}")
    if document.get("driver") != driver:
        raise CheckpointError(
            f"checkpoint {source} belongs to driver {document.get('driver')!r}, not {driver!r}"
        )
    claims = document.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointError(f"checkpoint {source}: claims is not an object")
    return {uid: _claim(uid, entry, f"checkpoint {source}: claims[{uid}]") for uid, entry in claims.items()}


class Checkpoint:
    """The checkpoint file of one driver. Reads and writes block briefly; callers run them inline."""

    def __init__(self, path: Path, driver: str) -> None:
        self.path = path
        self.driver = driver
        self._known: tuple[tuple[int, int, int, int], dict[str, PreparedClaim]] | None = None

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {error.strerror}") from error
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    @classmethod
    def for_driver(cls, plugins_dir: Path, driver: str) -> Checkpoint:
        """``<plugins dir>/<driver>/checkpoint.json``, the directory the kubelet gives the driver."""
        return cls(plugins_dir / driver / FILE_NAME, driver)

    def load(self) -> dict[str, PreparedClaim]:
        """The claims on disk; none when there is no file yet."""
        identity = self._identity()
        if identity is None:
            return {}
        if self._known is not None and self._known[0] == identity:
            return dict(self._known[1])
        try:
            with open(self.path, "rb") as file:
                data = file.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {error.strerror}") from error
        if len(data) > MAX_BYTES:
            raise CheckpointError(f"checkpoint {self.path} is larger than {MAX_BYTES} bytes")
        claims = decode(data, os.fspath(self.path), self.driver)
        self._known = (identity, claims)
        return dict(claims)

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file with ``claims``, atomically."""
        content = encode(self.driver, claims)
        directory = self.path.parent
        temporary = directory / f".{self.path.name}.{os.urandom(4).hex()}.tmp"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o750)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise CheckpointError(f"cannot write checkpoint {self.path}: {error.strerror}") from error
        identity = self._identity()
        self._known = None if identity is None else (identity, dict(claims))

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
        """Read, apply ``change`` and write back under the lock; the claims now on disk.

        ``change`` edits the mapping in place or returns a new one; nothing is written when the content
        did not change, so a repeated unprepare costs no disk write.
        """
        with self._locked():
            before = self.load()
            after = dict(before)
            replaced = change(after)
            if replaced is not None:
                after = replaced
            if after != before:
                self.save(after)
            return after
