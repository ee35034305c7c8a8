"""The directory watch behind certificate reloads: which changes wake it, and a directory that comes late
or is replaced."""

from __future__ import annotations

import asyncio
import shutil
import struct
from pathlib import Path

import pytest

from intel_device_plugins.kube.dirwatch import (
    IN_CREATE,
    IN_DELETE_SELF,
    IN_IGNORED,
    DirectoryChanges,
    watch_lost,
)


def event(mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (-len(name) % 16) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


def test_watch_lost_reads_every_event_of_a_buffer() -> None:
    assert not watch_lost(event(IN_CREATE, b"..data_tmp") + event(IN_CREATE, b"tls.crt"))
    assert watch_lost(event(IN_CREATE, b"..data_tmp") + event(IN_DELETE_SELF) + event(IN_IGNORED))
    assert not watch_lost(b"")


async def woken(changes: DirectoryChanges, within_s: float = 1.0) -> bool:
    try:
        await asyncio.wait_for(changes.changed.wait(), within_s)
    except TimeoutError:
        return False
    changes.changed.clear()
    return True


async def test_renames_and_symlink_swaps_wake_the_watch(tmp_path: Path) -> None:
    changes = DirectoryChanges(tmp_path)
    try:
        if not changes.watch():
            pytest.fail("inotify is not available on this Linux host")
        assert not await woken(changes, 0.2)
        (tmp_path / "..gen1").mkdir()
        assert await woken(changes)
        (tmp_path / "..data_tmp").symlink_to("..gen1")
        (tmp_path / "..data_tmp").rename(tmp_path / "..data")
        assert await woken(changes)
        (tmp_path / ".tls.crt.tmp").write_bytes(b"x")
        (tmp_path / ".tls.crt.tmp").replace(tmp_path / "tls.crt")
        assert await woken(changes)
    finally:
        changes.close()


async def test_a_directory_that_comes_late_or_is_replaced_is_watched_again(tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    changes = DirectoryChanges(directory)
    try:
        assert not changes.watch()  # not there yet: the caller polls
        directory.mkdir()
        assert changes.watch()
        shutil.rmtree(directory)
        assert await woken(changes)
        await asyncio.sleep(0.05)
        assert not changes.watch()
        directory.mkdir()
        assert changes.watch()
        (directory / "tls.key").write_bytes(b"x")
        assert await woken(changes)
    finally:
        changes.close()
