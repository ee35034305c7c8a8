"""The checkpoint file: round trip, atomic replacement, clear errors, shared by two instances."""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.dra import checkpoint as checkpoint_module
from intel_device_plugins.dra.checkpoint import (
    Checkpoint,
    CheckpointError,
    decode,
    encode,
    file_system_type,
    forget_vanished,
    is_volatile,
)
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


def _add(uid: str) -> Callable[[dict[str, PreparedClaim]], None]:
    return lambda claims: claims.update({uid: _claim(uid)})


def _drop(uid: str) -> Callable[[dict[str, PreparedClaim]], None]:
    def drop(claims: dict[str, PreparedClaim]) -> None:
        del claims[uid]

    return drop


def _claim(uid: str, devices: tuple[PreparedDevice, ...] = (), files: tuple[str, ...] = ()) -> PreparedClaim:
    return PreparedClaim(claim=ClaimRef("ns", f"c-{uid}", uid), devices=devices, cdi_spec_files=files)


@given(st.dictionaries(_uids, st.lists(_device, max_size=3).map(tuple), max_size=5))
def test_encode_decode_round_trip(entries: dict[str, tuple[PreparedDevice, ...]]) -> None:
    claims = {uid: _claim(uid, devices, (f"k8s.x-claim_{uid}.json",)) for uid, devices in entries.items()}
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


HEADER = b'{"driver":"gpu.example.com","version":1}\n'
PREPARED_U = b'{"prepared":{"uid":"u","namespace":"n","name":"c","devices":[],"cdiSpecFiles":[]}}\n'
PREPARED_V = PREPARED_U.replace(b'"u"', b'"v"')
DAMAGE = [
    pytest.param(b"", set(), r"line 1: the file is empty", id="empty file"),
    pytest.param(b'{"driver":', set(), r"line 1 is cut short", id="header cut short"),
    pytest.param(b"{not json\n" + PREPARED_U, {"u"}, r"line 1 is not valid JSON", id="bad header"),
    pytest.param(
        b"[]\n" + PREPARED_U, {"u"}, r"line 1 is neither a header nor a record", id="header not an object"
    ),
    pytest.param(
        b'{"version": 9, "driver": "gpu.example.com"}\n' + PREPARED_U,
        {"u"},
        r"line 1: version 9; this driver writes 1",
        id="another version",
    ),
    pytest.param(
        b'{"version": 1, "driver": "other"}\n' + PREPARED_U,
        {"u"},
        r"line 1: written by driver 'other'",
        id="another driver",
    ),
    pytest.param(PREPARED_U + PREPARED_V, {"u", "v"}, r"line 1: no header", id="no header"),
    pytest.param(
        HEADER + PREPARED_U + b"{broken\n" + PREPARED_V,
        {"u", "v"},
        r"line 3 is not valid JSON",
        id="bad line",
    ),
    pytest.param(
        HEADER + PREPARED_U + b'{"other": 1}\n' + PREPARED_V,
        {"u", "v"},
        r"line 3 is neither a prepared nor an unprepared record",
        id="unknown record",
    ),
    pytest.param(
        HEADER
        + PREPARED_U.replace(b'"cdiSpecFiles":[]', b'"cdiSpecFiles":["../../etc/passwd"]')
        + PREPARED_V,
        {"v"},
        r"line 2: prepared.cdiSpecFiles: '../../etc/passwd' is not a plain file name",
        id="path in a record",
    ),
    pytest.param(
        HEADER + PREPARED_U.replace(b'"devices":[]', b'"devices":[{"requests":"gpu"}]') + PREPARED_V,
        {"v"},
        r"line 2: prepared.devices\[0\].requests is not a list of strings",
        id="bad field",
    ),
    pytest.param(bytes(range(256)) * 8, set(), r"line 1 is not valid JSON", id="garbage"),
    pytest.param(
        HEADER + PREPARED_U + b"\0" * 300 + b"\n" + PREPARED_V, {"u", "v"}, r"line 3", id="NUL bytes"
    ),
    pytest.param(b"\0" * 4096, set(), r"line 1 is cut short", id="all NUL bytes"),
    pytest.param(HEADER + PREPARED_U + b"\xff\xfe\n" + PREPARED_V, {"u", "v"}, r"line 3", id="not UTF-8"),
    pytest.param(
        HEADER + PREPARED_U + PREPARED_V[:30], {"u"}, r"line 3 is cut short", id="last line cut short"
    ),
]


@pytest.mark.parametrize(("content", "kept", "message"), DAMAGE)
def test_a_damaged_checkpoint_keeps_what_it_can_read_and_names_file_and_line(
    tmp_path: Path, content: bytes, kept: set[str], message: str
) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.parent.mkdir(parents=True)
    checkpoint.path.write_bytes(content)
    assert set(checkpoint.load()) == kept
    assert any(re.search(f"checkpoint {checkpoint.path} {message}", p) for p in checkpoint.problems), (
        checkpoint.problems
    )
    # The next change writes a whole, clean file; the damaged one is kept beside it for a look.
    checkpoint.update(_add("w"))
    fresh = Checkpoint(checkpoint.path, DRIVER)
    assert set(fresh.load()) == kept | {"w"} and fresh.problems == ()
    assert checkpoint.path.with_name("checkpoint.json.damaged").read_bytes() == content


def test_damage_is_logged_once_naming_file_and_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.parent.mkdir(parents=True)
    checkpoint.path.write_bytes(HEADER + b"{broken\n" + PREPARED_U)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert set(checkpoint.load()) == {"u"}
    lines = [r.getMessage() for r in caplog.records if "line 2" in r.getMessage()]
    assert len(lines) == 1 and str(checkpoint.path) in lines[0] and "skipped" in lines[0]


def test_a_last_line_cut_short_is_information_not_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A read without the lock may meet the other instance's append half-way: no warning for that."""
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.parent.mkdir(parents=True)
    checkpoint.path.write_bytes(HEADER + PREPARED_U + PREPARED_V[:20])
    with caplog.at_level(logging.INFO):
        assert set(checkpoint.load()) == {"u"}
    assert [(r.levelno, "line 3 is cut short" in r.getMessage()) for r in caplog.records] == [
        (logging.INFO, True)
    ]


def test_a_strict_decode_still_refuses_damage() -> None:
    with pytest.raises(CheckpointError, match=r"checkpoint mem line 2 is not valid JSON"):
        decode(HEADER + b"{broken\n", "mem", DRIVER)


def test_a_directory_in_place_of_the_file_is_an_error_naming_it(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.mkdir(parents=True)
    with pytest.raises(CheckpointError, match=f"checkpoint {checkpoint.path}"):
        checkpoint.load()
    with pytest.raises(CheckpointError, match=f"checkpoint {checkpoint.path}"):
        checkpoint.update(_add("a"))


def test_changes_are_appended_as_one_line_each(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.update(lambda claims: claims.update(a=_claim("a")))
    inode = checkpoint.path.stat().st_ino
    lines = checkpoint.path.read_bytes().count(b"\n")
    checkpoint.update(lambda claims: claims.update(b=_claim("b")))
    checkpoint.update(_drop("a"))
    assert checkpoint.path.stat().st_ino == inode  # appended, not replaced
    assert checkpoint.path.read_bytes().count(b"\n") == lines + 2
    assert set(Checkpoint(checkpoint.path, DRIVER).load()) == {"b"}


def test_the_file_is_compacted_when_records_outnumber_claims(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.update(lambda claims: claims.update(keep=_claim("keep")))
    longest = 0
    for round_ in range(200):
        uid = f"r{round_}"
        checkpoint.update(_add(uid))
        checkpoint.update(_drop(uid))
        longest = max(longest, checkpoint.path.read_bytes().count(b"\n"))
    assert longest <= 1 + 2 * 1 + 64 + 1  # header, bound, and the record that tipped it
    assert set(Checkpoint(checkpoint.path, DRIVER).load()) == {"keep"}


def test_a_cut_short_last_record_is_ignored_and_rewritten_by_the_next_change(tmp_path: Path) -> None:
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.update(lambda claims: claims.update(a=_claim("a")))
    with open(checkpoint.path, "ab") as file:
        file.write(b'{"prepared":{"uid":"b","namesp')  # the power went during an append
    fresh = Checkpoint(checkpoint.path, DRIVER)
    assert set(fresh.load()) == {"a"}
    fresh.update(lambda claims: claims.update(c=_claim("c")))
    assert checkpoint.path.read_bytes().endswith(b"\n")
    assert set(Checkpoint(checkpoint.path, DRIVER).load()) == {"a", "c"}


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
    assert Checkpoint(checkpoint.path, DRIVER).load() == {"a": _claim("a")}
    assert sorted(p.name for p in checkpoint.path.parent.iterdir()) == ["checkpoint.json"]


def test_appends_sync_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for sync, name in ((True, "durable"), (False, "volatile")):
        synced: list[int] = []
        monkeypatch.setattr("os.fdatasync", synced.append)
        checkpoint = Checkpoint(tmp_path / name / "checkpoint.json", DRIVER, sync_appends=sync)
        checkpoint.update(_add("a"))  # the first change writes the file whole (fsync, rename)
        checkpoint.update(_add("b"))  # later ones append
        assert set(Checkpoint(checkpoint.path, DRIVER).load()) == {"a", "b"}
        assert len(synced) == int(sync), name


def test_claims_whose_specs_vanished_are_forgotten(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "kept.yaml").write_text("x")
    claims = {
        "kept": _claim("kept", files=("kept.yaml",)),
        "gone": _claim("gone", files=("gone.yaml",)),
        "none": _claim("none"),
    }
    # A claim that wrote no spec had nothing of this driver: nothing to undo, so its record goes too
    # (an older driver recorded such claims, and only an unprepare the kubelet never sends removed them).
    assert set(forget_vanished(claims, cdi)) == {"kept"}


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
25 22 0:21 / /run rw,nosuid shared:5 - tmpfs tmpfs rw,mode=755
26 22 0:22 / /var/lib/kubelet rw shared:6 - ext4 /dev/sdb1 rw
27 25 0:23 / /run/my\\040dir rw shared:7 - ramfs none rw
"""


@pytest.mark.parametrize(
    ("path", "fs_type"),
    [
        ("/var/run-not/cdi", "ext4"),
        ("/run/cdi", "tmpfs"),
        ("/run", "tmpfs"),
        ("/var/lib/kubelet/plugins/x", "ext4"),
        ("/run/my dir/cdi", "ramfs"),
        ("/etc/cdi", "ext4"),
    ],
)
def test_the_file_system_of_a_path_is_its_deepest_mount(path: str, fs_type: str) -> None:
    assert file_system_type(Path(path), MOUNTINFO) == fs_type


def test_a_tmpfs_directory_is_volatile_and_a_disk_one_is_not() -> None:
    assert is_volatile(Path("/dev/shm")) is True
    assert is_volatile(Path(__file__).parent / "not-created-yet") is False, "the checkout is on a disk"


def test_a_file_over_the_bound_is_read_up_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_module, "MAX_BYTES", len(HEADER + PREPARED_U) + 10)
    checkpoint = Checkpoint.for_driver(tmp_path, DRIVER)
    checkpoint.path.parent.mkdir(parents=True)
    checkpoint.path.write_bytes(HEADER + PREPARED_U + PREPARED_V * 100)
    assert set(checkpoint.load()) == {"u"}
    assert any(f"checkpoint {checkpoint.path} is larger than" in p for p in checkpoint.problems)
