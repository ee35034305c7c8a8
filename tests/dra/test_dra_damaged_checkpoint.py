"""A driver restarted on a damaged or unwritable checkpoint: it starts, keeps what it can, unprepares
by the spec file's name, and fails each prepare it cannot record with the path named."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.driver import DriverConfig, KubeletEndpoint, api_parts
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.model import ClaimRef, PreparedClaim
from intel_device_plugins.kube.rest import RestClient
from k8stest.fakeclaims import fake_claims_api
from tests.dra.draclaims import DRIVER, NODE, Profile, claim, result
from tests.dra.test_dra_checkpoint import DAMAGE

UID_A = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
UID_B = "7c1d0e9f-1111-4a51-9c8e-2f4b6d8a0c1e"
A = ClaimRef("ns", "a", UID_A)
B = ClaimRef("ns", "b", UID_B)
DOCUMENTS = {
    ("ns", "a"): claim(UID_A, result("card0"), name="a"),
    ("ns", "b"): claim(UID_B, result("card1"), name="b"),
}


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _config(root: Path) -> DriverConfig:
    return DriverConfig(
        node_name=NODE, cdi_root=root / "cdi", registrar_dir=root / "registry", plugins_dir=root / "plugins"
    )


@asynccontextmanager
async def _starts(root: Path) -> AsyncIterator[Any]:
    """``start()``: builds the driver's parts as a (re)started driver does, and answers its service."""
    async with fake_claims_api(lambda ns, name: DOCUMENTS.get((ns, name))) as api:
        assert api.config is not None
        client = RestClient(api.config)
        profile = Profile()

        def start() -> KubeletService:
            parts = api_parts(profile, _config(root), client)(profile.scan)
            assert isinstance(parts.kubelet, KubeletEndpoint)
            return parts.kubelet.service

        try:
            yield start
        finally:
            await client.close()


def _spec(root: Path, uid: str) -> Path:
    return root / "cdi" / f"k8s.{DRIVER}-claim_{uid}.json"


def _checkpoint(root: Path) -> Path:
    return root / "plugins" / DRIVER / "checkpoint.json"


async def _prepared(service: KubeletService, ref: ClaimRef) -> PreparedClaim | BaseException:
    return (await service.prepare([ref]))[ref.uid]


@pytest.mark.parametrize(("content", "kept", "message"), DAMAGE)
async def test_a_restarted_driver_starts_on_a_damaged_checkpoint_and_unprepares_by_name(
    root: Path, content: bytes, kept: set[str], message: str
) -> None:
    async with _starts(root) as start:
        first = start()
        assert isinstance(await _prepared(first, A), PreparedClaim)
        assert _spec(root, UID_A).exists()
        _checkpoint(root).write_bytes(content)  # the record of A is lost with the damage

        restarted = start()
        assert restarted.unprepare([A]) == {UID_A: None}
        assert not _spec(root, UID_A).exists()
        assert isinstance(await _prepared(restarted, B), PreparedClaim)
        assert _spec(root, UID_B).exists() and UID_B in restarted.checkpoint.load()
        assert restarted.checkpoint.problems == ()  # the change rewrote the file whole


def _directory_in_place(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _checkpoint(root).unlink()
    _checkpoint(root).mkdir()


def _disk_full(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open
    driver_dir = os.fspath(_checkpoint(root).parent)

    def full(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).startswith(driver_dir) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", full)


@pytest.mark.parametrize(
    "damage", [_directory_in_place, _disk_full], ids=["directory in its place", "disk full"]
)
async def test_a_driver_starts_on_an_unwritable_checkpoint_and_fails_each_prepare_naming_it(
    root: Path, damage: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with _starts(root) as start:
        assert isinstance(await _prepared(start(), A), PreparedClaim)
        damage(root, monkeypatch)
        with caplog.at_level(logging.WARNING):
            restarted = start()  # must not raise
        assert any(
            str(_checkpoint(root).parent) in r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.ERROR
        )

        failed = await _prepared(restarted, B)
        assert isinstance(failed, Exception) and str(_checkpoint(root).parent) in str(failed)
        assert not _spec(root, UID_B).exists()
        # The claim's devices are given back even though the checkpoint cannot say so.
        assert restarted.unprepare([A]) == {UID_A: None}
        assert not _spec(root, UID_A).exists()
