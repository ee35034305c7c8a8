"""``intel-device-plugins-demo --node-runtime real`` end to end: its own control plane and real
node with the demo profile, the plugin DaemonSets from the node image, a pod with one GPU, a
hot-plug, and a clean teardown. Fails under CI=true when a prerequisite is missing, skips elsewhere.
"""

from __future__ import annotations

import pytest

from k8stest.demo import main
from k8stest.demo_real import find_prerequisites, prerequisite_message
from k8stest.pytest_plugin import _unavailable

pytestmark = pytest.mark.k8s


def test_real_runtime_demo_runs_the_scenario_and_leaves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    prereqs, missing = find_prerequisites()
    if prereqs is None:
        _unavailable(prerequisite_message(missing))
    code = main(["--node-runtime", "real"])
    output = capsys.readouterr().out
    assert code == 0, output
    lines = output.splitlines()
    assert lines[0].startswith("Node runtime: real"), output
    assert "skipped:" not in output
    assert "8 of 8 kinds allocatable" in output, output
    rows = {
        line.split()[0]: line.split()[1:]
        for line in lines
        if line.startswith(("gpu.", "dsa.", "sgx.", "fpga."))
    }
    # 6 i915 cards (4 + 2 SR-IOV VFs) x the sample's sharedDevNum 10, all allocatable
    assert rows["gpu.intel.com/i915"] == ["60", "60"], output
    assert rows["dsa.intel.com/wq-user-dedicated"] == ["1", "1"], output
    assert rows["sgx.intel.com/enclave"] == ["110", "110"], output
    # the sample's region mode: both simulated Arria 10 cards under their blue bitstream's interface ID
    assert rows["fpga.intel.com/region-ce48969398f05f33946d560708be108a"] == ["2", "2"], output
    assert "A pod asks for 1 x gpu.intel.com/i915: Succeeded" in output
    cards = [line for line in lines if line.strip().startswith("device node /dev/dri/card")]
    assert len(cards) == 1, output  # exactly the one allocated card
    assert "went from 60 to 70" in output and "back to 60" in output, output
    assert lines[-1] == "Left behind: nothing"
