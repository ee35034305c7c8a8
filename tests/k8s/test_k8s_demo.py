"""The demo against the kubelet's real device manager."""

from __future__ import annotations

import pytest

from k8stest.binaries import Binaries
from k8stest.demo import main


def test_demo_runs_against_the_real_device_manager(
    k8s_binaries: Binaries, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--kubelet", "device-manager"]) == 0
    output = capsys.readouterr().out
    assert "Kubelet: the kubelet's own device manager" in output
    assert "intel.cdi.k8s.io/gpu=card" in output
    assert "qat.intel.com/cy: devices" in output and "env QAT0=" in output
    assert "Hot-unplugged card8" in output
    assert "Sockets left behind: none" in output
