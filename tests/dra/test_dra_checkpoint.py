"""The checkpoint file: round trip, atomic replacement, clear errors, shared by two instances."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.dra.checkpoint import Checkpoint, CheckpointError, decode, encode
from intel_device_plugins.dra.model import ClaimRef, PreparedClaim, PreparedDevice
from tests.dra.draclaims import DRIVER

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
_device = st.builds(
    PreparedDevice,
    requests=st.tuples(_text),
    pool=_text,
    device=_text,
    cdi_device_ids=st.lists(_text, max_size=2).map(tuple),
    share_id=st.none() | _text,
)
_uids = st.from_regex(r"[a-f0-9]{1,8}", fullmatch=True)


def _claim(uid: str, devices: tuple[PreparedDevice, ...] = (), files: tuple[str, ...] = ()) -> PreparedClaim:
    return PreparedClaim(claim=ClaimRef("ns", f"c-{uid}", uid), devices=devices, cdi_spec_files=files)


@given(st.dictionaries(_uids, st.lists(_device, max_size=3).map(tuple), max_size=5))
def test_encode_decode_round_trip(entries: dict[str, tuple[PreparedDevice, ...]]) -> None:
    claims = {uid: _claim(uid, devices, (f"k8s.x-claim_{uid}.yaml",)) for uid, devices in entries.items()}
    assert decode(encode(DRIVER, claims), "mem", DRIVER) == claims


def test_save_load_and_file_mode(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path / "plugins", DRIVER)
    assert checkpoint.path == tmp_path / "plugins" / DRIVER / "checkpoint.json"
    assert checkpoint.load() == {}
    claims = {"u1": _claim("u1", (PreparedDevice(("gpu",), "node", "card0", ("k/claim=u1-card0",), "s"),))}
    checkpoint.save(claims)
    assert Checkpoint(checkpoint.path, DRIVER).load() == claims
    assert stat.S_IMODE(checkpoint.path.stat().st_mode) == 0o600
    assert [p.name for p in checkpoint.path.parent.iterdir()] == ["checkpoint.json"]


def test_update_writes_only_changes_and_sees_the_other_instance(tmp_path: Path) -> None:
    first = Checkpoint.for_driver(tmp_path, DRIVER)
    second = Checkpoint.for_driver(tmp_path, DRIVER)  # a second process during a rolling update
    first.update(lambda claims: claims.update(a=_claim("a")))
    second.update(lambda claims: claims.update(b=_claim("b")))
    assert set(first.load()) == {"a", "b"}
    inode = first.path.stat().st_ino
    first.update(lambda claims: None)
    assert first.path.stat().st_ino == inode  # nothing changed, nothing written


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", r"is not valid JSON"),
        (b"[]", r"is not a JSON object"),
        (b'{"version": 9, "driver": "gpu.example.com", "claims": {}}', r"has version 9; this driver reads 1"),
        (b'{"version": 1, "driver": "other", "claims": {}}', r"belongs to driver 'other'"),
        (b'{"version": 1, "driver": "gpu.example.com", "claims": []}', r"claims is not an object"),
        (
            b'{"version": 1, "driver": "gpu.example.com", "claims": {"u": {"namespace": "n", "name": "c",'
            b' "devices": [], "cdiSpecFiles": ["../../etc/passwd"]}}}',
            r"claims\[u\].cdiSpecFiles: '../../etc/passwd' is not a plain file name",
        ),
        (
            b'{"version": 1, "driver": "gpu.example.com", "claims": {"u": {"namespace": "n", "name": "c",'
            b' "devices": [{"requests": "gpu"}]}}}',
            r"claims\[u\].devices\[0\].requests is not a list of strings",
        ),
    ],
)
def test_unreadable_checkpoint_names_file_and_field(tmp_path: Path, content: bytes, message: str) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.parent.mkdir(parents=True)
    checkpoint.path.write_bytes(content)
    with pytest.raises(CheckpointError, match=f"checkpoint {checkpoint.path}.*{message}"):
        checkpoint.load()


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.save({"a": _claim("a")})
    before = checkpoint.path.read_bytes()
    # A file where the directory should be fails for root too (a read-only mode would not).
    blocked = Checkpoint(tmp_path / "file" / "checkpoint.json", DRIVER)
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*/file/checkpoint.json"):
        blocked.save({"a": _claim("a")})
    assert checkpoint.path.read_bytes() == before
    assert json.loads(before)["claims"]["a"]["name"] == "c-a"
    assert sorted(p.name for p in checkpoint.path.parent.iterdir()) == ["checkpoint.json"]
