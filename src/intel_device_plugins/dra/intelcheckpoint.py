"""Claims prepared by Intel's DRA drivers, taken over when this project's driver replaces one on a node.

Intel's GPU and QAT drivers keep their prepared claims in ``<plugins dir>/<driver>/preparedClaims.json``,
the directory this project's driver of the same name uses. The GPU driver writes a versioned object,
``{"kind": "PreparedClaimsCheckpoint", "apiVersion": "checkpoint.gpu.intel.com/v1", "PreparedClaims":
{<uid>: {"PreparedDevices": [{"AdminAccess": …, "KubeletpluginDevice": <device>}]}}}``; its older
releases and the QAT driver write the unversioned map ``{<uid>: {"Devices": [<device>], "Err": …}}``.
A device is ``{"Requests", "PoolName", "DeviceName", "CDIDeviceIDs", "ShareID"}`` (Go's field names;
Go writes an empty list as ``null`` and reads names in any letter case, so this reads them so too).

At start the driver copies those claims into its own checkpoint (a claim already there keeps its own
record) and renames the file ``preparedClaims.json.imported``, so a claim unprepared later is not taken
over again. Then a repeated prepare of such a claim answers what Intel's driver answered (its CDI devices
stay resolvable while Intel's spec files are left in its CDI directory), and unprepare forgets it as any
other claim. Intel's drivers record no claim namespace or name; those stay empty. A file that cannot be
read is left where it is and named in the log: the driver runs on, and a drain is then the way over.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from intel_device_plugins.dra.checkpoint import MAX_BYTES, Checkpoint, CheckpointError
from intel_device_plugins.dra.claims import ClaimError, check_claim_uid
from intel_device_plugins.dra.model import ClaimRef, PreparedClaim, PreparedDevice

log = logging.getLogger(__name__)

FILE_NAME: Final = "preparedClaims.json"
IMPORTED_SUFFIX: Final = ".imported"
CHECKPOINT_KIND: Final = "PreparedClaimsCheckpoint"
CHECKPOINT_API_VERSION: Final = "checkpoint.gpu.intel.com/v1"


def _field(entry: Mapping[str, Any], name: str) -> Any:
    """``entry[name]`` matched as Go's JSON decoder matches field names: exactly, else in any case."""
    if name in entry:
        return entry[name]
    lowered = name.lower()
    return next((value for key, value in entry.items() if key.lower() == lowered), None)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CheckpointError(f"{where} is not a list")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    items = _list(value, where)
    if not all(isinstance(item, str) for item in items):
        raise CheckpointError(f"{where} is not a list of strings")
    return tuple(items)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise CheckpointError(f"{where} is not a non-empty string")
    return value


def _device(entry: Any, where: str) -> PreparedDevice:
    device = _object(entry, where)
    share_id = _field(device, "ShareID")
    if share_id is not None and not isinstance(share_id, str):
        raise CheckpointError(f"{where}.ShareID is not a string")
    return PreparedDevice(
        requests=_strings(_field(device, "Requests"), f"{where}.Requests"),
        pool=_text(_field(device, "PoolName"), f"{where}.PoolName"),
        device=_text(_field(device, "DeviceName"), f"{where}.DeviceName"),
        cdi_device_ids=_strings(_field(device, "CDIDeviceIDs"), f"{where}.CDIDeviceIDs"),
        share_id=share_id or None,
    )


def _claim(uid: str, devices: list[PreparedDevice]) -> PreparedClaim:
    return PreparedClaim(claim=ClaimRef(namespace="", name="", uid=uid), devices=tuple(devices))


def decode(data: bytes, source: str) -> dict[str, PreparedClaim]:
    """The claims in an Intel checkpoint's bytes, either format; :class:`CheckpointError` naming
    ``source`` and the field that is wrong."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{source} is not valid JSON: {error}") from error
    top = _object(document, source)
    versioned = _field(top, "kind") == CHECKPOINT_KIND
    if versioned:
        version = _field(top, "apiVersion")
        if version != CHECKPOINT_API_VERSION:
            raise CheckpointError(
                f"{source} has apiVersion {version!r}; this driver reads {CHECKPOINT_API_VERSION}"
            )
        entries = _object(_field(top, "PreparedClaims") or {}, f"{source}: PreparedClaims")
    else:
        entries = top
    claims: dict[str, PreparedClaim] = {}
    for uid, entry in entries.items():
        where = f"{source}: claim {uid}"
        try:
            check_claim_uid(uid)
        except ClaimError as error:
            raise CheckpointError(f"{source}: {error}") from error
        claim = _object(entry, where)
        if versioned:
            devices = [
                _device(
                    _field(_object(prepared, f"{where}.PreparedDevices[{i}]"), "KubeletpluginDevice"),
                    f"{where}.PreparedDevices[{i}].KubeletpluginDevice",
                )
                for i, prepared in enumerate(
                    _list(_field(claim, "PreparedDevices"), f"{where}.PreparedDevices")
                )
            ]
        else:
            devices = [
                _device(device, f"{where}.Devices[{i}]")
                for i, device in enumerate(_list(_field(claim, "Devices"), f"{where}.Devices"))
            ]
        claims[uid] = _claim(uid, devices)
    return claims


def take_over(plugins_dir: Path, driver: str, checkpoint: Checkpoint) -> int:
    """Copy the claims of Intel's checkpoint for ``driver`` into ``checkpoint`` and set the file aside;
    how many claims were taken over. Nothing to do (0) when there is no such file; a file that cannot be
    read or set aside is logged, left in place, and taken over on a later start."""
    path = plugins_dir / driver / FILE_NAME
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return 0
    except OSError as error:
        log.error(
            "%s: cannot read Intel's checkpoint %s: %s; its claims are not taken over", driver, path, error
        )
        return 0
    try:
        if len(data) > MAX_BYTES:
            raise CheckpointError(f"{path} is larger than {MAX_BYTES} bytes")
        claims = decode(data, os.fspath(path))

        def merge(current: dict[str, PreparedClaim]) -> dict[str, PreparedClaim]:
            return {**claims, **current}

        checkpoint.update(merge)
    except CheckpointError as error:
        log.error("%s: Intel's checkpoint is not taken over: %s", driver, error)
        return 0
    try:
        os.replace(path, path.with_name(FILE_NAME + IMPORTED_SUFFIX))
    except OSError as error:
        log.warning("%s: took over %d claims, but cannot rename %s: %s", driver, len(claims), path, error)
    log.info("%s: took over %d claims prepared by Intel's driver from %s", driver, len(claims), path)
    return len(claims)
