from __future__ import annotations

import pytest

from intel_device_plugins.sim.demo import main

pytestmark = pytest.mark.integration


def test_demo_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    output = capsys.readouterr().out
    assert "gpu.intel.com/i915" in output and "card0-0" in output
    assert "intel.cdi.k8s.io/gpu=card" in output
    assert "Hot-plugged card8" in output and "Hot-unplugged card8" in output
    assert "sockets left behind: none" in output
