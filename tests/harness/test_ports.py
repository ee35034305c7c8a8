"""k8stest.ports: ports outside the kernel's ephemeral range, never handed out twice at once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8stest.ports import (
    DEFAULT_COMPONENT_PORTS,
    EPHEMERAL_RANGE_FILE,
    LOCK_DIR_ENV,
    POOL_ENV,
    PortsExhausted,
    default_pool,
    parse_port_range,
    port_is_bindable,
    release_all,
    reserve_port,
    reserve_ports,
    reserved_ports,
)

EPHEMERAL_TEXT = EPHEMERAL_RANGE_FILE.read_text()
EPHEMERAL = parse_port_range(EPHEMERAL_TEXT, "ephemeral")


def free_pool(count: int) -> tuple[int, ...]:
    """``count`` ports of this machine's pool that nothing holds now."""
    found = [p for p in default_pool({}, EPHEMERAL_TEXT)[:500] if port_is_bindable(p)][:count]
    assert len(found) == count, "the machine's pool has too few free ports for this test"
    return tuple(found)


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def test_parse_port_range_reads_the_kernel_file_and_names_bad_input() -> None:
    assert parse_port_range("32768\t60999\n", "f") == range(32768, 61000)
    assert parse_port_range("20000-20009", "f") == range(20000, 20010)
    with pytest.raises(ValueError, match="K8STEST_PORT_RANGE: expected two port numbers"):
        parse_port_range("20000", "K8STEST_PORT_RANGE")
    with pytest.raises(ValueError, match="f: 30000-20000 is not a range"):
        parse_port_range("30000 20000", "f")
    with pytest.raises(ValueError, match="not a range"):
        parse_port_range("1 70000", "f")


def test_the_pool_lies_outside_the_ephemeral_range_and_avoids_default_ports() -> None:
    pool = default_pool({}, EPHEMERAL_TEXT)
    assert len(pool) > 1000
    assert not [p for p in pool if p in EPHEMERAL]
    assert not set(pool) & DEFAULT_COMPONENT_PORTS
    assert min(pool) >= 1024
    # another kernel setting: the pool follows it
    low = default_pool({}, "25000 60999")
    assert max(low) < 25000 and not set(low) & DEFAULT_COMPONENT_PORTS
    # a range that includes default ports still never hands them out
    assert 10250 not in default_pool({POOL_ENV: "10000-10999"}, EPHEMERAL_TEXT)


def test_a_pool_that_cannot_avoid_the_ephemeral_range_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=f"{POOL_ENV}=33000-33100 overlaps the kernel's ephemeral range"):
        default_pool({POOL_ENV: "33000-33100"}, "32768 60999")
    with pytest.raises(ValueError, match=f"set {POOL_ENV}=FIRST-LAST"):
        default_pool({}, "1024 65535")


def test_reserved_ports_are_outside_the_ephemeral_range(lock_dir: Path) -> None:
    reservations = reserve_ports(20, lock_dir=lock_dir)
    try:
        ports = [r.port for r in reservations]
        assert len(set(ports)) == 20
        assert not [p for p in ports if p in EPHEMERAL]
    finally:
        release_all(reservations)


def test_the_default_lock_dir_is_shared_and_sticky(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "shared"))
    with reserve_port() as reservation:
        assert reservation.lock_path.parent == tmp_path / "shared"
        assert (tmp_path / "shared").stat().st_mode & 0o7777 == 0o1777
        assert reservation.port not in EPHEMERAL


def test_a_lock_path_that_is_no_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    for name in ("file", "link"):
        with pytest.raises(RuntimeError, match=f"{name}: port lock directory is not a directory"):
            reserve_port(lock_dir=tmp_path / name)


def test_a_held_reservation_is_not_handed_out_again_until_released(lock_dir: Path) -> None:
    (port,) = free_pool(1)
    first = reserve_port(pool=(port,), lock_dir=lock_dir)
    with pytest.raises(PortsExhausted, match="1 reserved"):
        reserve_port(pool=(port,), lock_dir=lock_dir)  # same process, another reservation
    first.release()
    first.release()  # idempotent
    with reserve_port(pool=(port,), lock_dir=lock_dir) as again:
        assert again.port == port and again.held
    assert not again.held


def test_a_port_held_by_another_socket_is_skipped(lock_dir: Path) -> None:
    taken, free = free_pool(2)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        assert not port_is_bindable(taken)
        with reserve_port(pool=(taken, free), lock_dir=lock_dir) as got:
            assert got.port == free
        with pytest.raises(PortsExhausted, match="1 in use by other programs"):
            reserve_port(pool=(taken,), lock_dir=lock_dir)
    if socket.has_ipv6:
        with socket.socket(socket.AF_INET6) as squatter6:
            squatter6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            squatter6.bind(("::1", taken))
            squatter6.listen()
            assert not port_is_bindable(taken)


def test_exhaustion_says_which_pool_and_where_the_locks_are(lock_dir: Path) -> None:
    pool = free_pool(3)
    held = reserve_ports(3, pool=pool, lock_dir=lock_dir)
    try:
        with pytest.raises(PortsExhausted) as info:
            reserve_port(pool=pool, lock_dir=lock_dir)
        message = str(info.value)
        assert f"{min(pool)}-{max(pool)}" in message
        assert "3 reserved" in message and str(lock_dir) in message and POOL_ENV in message
    finally:
        release_all(held)


def test_reserved_ports_gives_numbers_back_when_the_block_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "shared"))
    with pytest.raises(RuntimeError, match="inside"), reserved_ports(2) as (first, second):
        assert first != second
        raise RuntimeError("inside")
    for port in (first, second):  # released although the block failed
        with reserve_port(pool=(port,)) as again:
            assert again.port == port


def test_reserve_ports_is_all_or_nothing(lock_dir: Path) -> None:
    pool = free_pool(2)
    with pytest.raises(PortsExhausted):
        reserve_ports(3, pool=pool, lock_dir=lock_dir)
    release_all(reserve_ports(2, pool=pool, lock_dir=lock_dir))  # nothing was left held


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from k8stest.ports import reserve_ports
    pool = tuple(int(p) for p in sys.argv[2].split(","))
    held = reserve_ports(int(sys.argv[3]), pool=pool, lock_dir=Path(sys.argv[1]))
    print(",".join(str(r.port) for r in held), flush=True)
    sys.stdin.read()  # hold until the parent closes stdin
    """
)


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.wait(10)


def test_two_processes_never_get_the_same_port(lock_dir: Path, holders: list[subprocess.Popen[str]]) -> None:
    """Two processes race for a pool just big enough for both; then the pool is exhausted for a third,
    until one of them dies (killed: no chance to release), which frees its ports."""
    pool = free_pool(16)
    argv = [sys.executable, "-c", HOLDER, str(lock_dir), ",".join(map(str, pool)), "8"]
    for _ in range(2):
        holders.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    got = []
    for proc in holders:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"holder exited with {proc.wait(10)}"
        got.append({int(p) for p in line.split(",")})
    assert len(got[0]) == len(got[1]) == 8
    assert not got[0] & got[1]
    assert got[0] | got[1] == set(pool)
    with pytest.raises(PortsExhausted, match="16 reserved"):
        reserve_port(pool=pool, lock_dir=lock_dir)
    os.kill(holders[0].pid, signal.SIGKILL)
    holders[0].wait(10)
    with reserve_port(pool=pool, lock_dir=lock_dir) as freed:
        assert freed.port in got[0]
