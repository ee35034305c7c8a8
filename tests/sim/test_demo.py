from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.sim.demo import main

pytestmark = pytest.mark.integration


def test_demo_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubelet", "stand-in"]) == 0
    output = capsys.readouterr().out
    assert output.splitlines()[0] == (
        "Node runtime: sim (plugin processes on a simulated node; kubelet: the demo's kubelet stand-in)"
    )
    assert "gpu.intel.com/i915" in output and "card0-0" in output
    assert "intel.cdi.k8s.io/gpu=card" in output
    assert "Hot-plugged card8" in output and "Hot-unplugged card8" in output
    assert "xpumd reports uncorrectable memory errors on card0 (" in output
    assert (
        "card0-0, card0-1 Unhealthy in" in output
        and "re-attaches card0 after a reset: Healthy again" in output
    )
    assert "Sockets left behind: none" in output
    for resource in (
        "qat.intel.com/cy",
        "dsa.intel.com/wq-user-shared",
        "sgx.intel.com/enclave",
        "npu.intel.com/accel",
    ):
        assert resource in output
    assert "env QAT0=" in output
    assert "fpga.intel.com/af-ce4.d84." in output and "CDI intel.cdi.k8s.io/fpga=dfl-fme." in output
    assert "createRuntime hook path: /opt/intel/fpga-sw/intel-fpga-crihook" in output


def test_demo_on_a_custom_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node.toml"
    node.write_text('[node]\nnuma_nodes = 2\n[[gpu]]\ndriver = "xe"\ncount = 2\nnuma_node = 1\n')
    assert main(["--node", str(node), "--kubelet", "stand-in"]) == 0
    output = capsys.readouterr().out
    assert "gpu.intel.com/xe" in output and "gpu.intel.com/i915" not in output
    assert "Hot-plugged card2 (xe" in output


def _table_rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RESOURCE"))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_demo_table_waits_for_every_first_device_list(capsys: pytest.CaptureFixture[str]) -> None:
    """Every resource in the table has its devices: none is printed between registration and first list."""
    assert main(["--kubelet", "stand-in"]) == 0
    rows = _table_rows(capsys.readouterr().out)
    names = {row[0] for row in rows}
    assert {"dsa.intel.com/wq-user-dedicated", "qat.intel.com/cy", "qat.intel.com/dc"} <= names
    for row in rows:
        assert int(row[1]) > 0, row
