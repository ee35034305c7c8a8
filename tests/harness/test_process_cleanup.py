"""A test that fails half-way leaves no process behind: what it started is stopped by its owner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from k8stest.process import ManagedProcess, group_alive

# Inner tests run by a separate pytest: each starts processes (one of them with a child of its own,
# which only a signal to the whole group reaches), records their process groups, then fails.
INNER = textwrap.dedent(
    """
    import json
    import os
    from pathlib import Path

    import pytest

    from k8stest.ports import reserved_ports
    from k8stest.process import ManagedProcess

    RECORD = Path(os.environ["CLEANUP_RECORD"])
    SLEEPER = ["sh", "-c", "sleep 300 & exec sleep 300"]


    def record(proc):
        with RECORD.open("a") as f:
            f.write(json.dumps({"pgid": os.getpgid(proc.pid)}) + "\\n")


    @pytest.fixture
    def owned(tmp_path):
        with ManagedProcess("fixture-owned", SLEEPER, tmp_path / "fixture.log") as proc:
            record(proc)
            yield proc


    def test_fails_while_a_fixture_owns_a_process(owned):
        assert owned.alive()
        assert False, "failing half-way"


    def test_fails_inside_its_own_with_block(tmp_path):
        with reserved_ports(1) as (port,), ManagedProcess("test-owned", SLEEPER, tmp_path / "t.log") as proc:
            record(proc)
            raise RuntimeError(f"failing half-way, port {port}")
    """
)


def test_a_failing_test_leaves_no_process_behind(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "CLEANUP_RECORD": str(record)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 failed" in run.stdout, run.stdout
    pgids = [json.loads(line)["pgid"] for line in record.read_text().splitlines()]
    assert len(pgids) == 2
    assert not [pg for pg in pgids if group_alive(pg)], "processes outlived the failed tests"


def test_managed_process_stops_its_whole_group_when_the_block_raises(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        ManagedProcess("sleeper", ["sh", "-c", "sleep 300 & exec sleep 300"], tmp_path / "log") as proc,
    ):
        pgid = os.getpgid(proc.pid)
        assert group_alive(pgid)
        raise RuntimeError("boom")
    assert not proc.alive()
    assert not group_alive(pgid)
