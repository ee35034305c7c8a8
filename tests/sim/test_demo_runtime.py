"""The demo's ``--node-runtime`` choice: argument handling, the first line, the real runtime's
prerequisite messages and the pure parts of its scenario (no node is started here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from intel_device_plugins.sim import demo
from intel_device_plugins.sim.demo import parse_args, runtime_banner
from intel_device_plugins.sim.node import parse_node_spec
from intel_device_plugins.sim.profiles import profile_text
from k8stest.demo import main
from k8stest.demo_real import (
    KindPlan,
    Missing,
    advertised,
    describe_pod_output,
    missing_prerequisites,
    plan_kinds,
    prerequisite_message,
    resource_table,
)


def test_sim_is_the_default_runtime_with_the_auto_kubelet() -> None:
    args = parse_args([])
    assert (args.node_runtime, args.kubelet) == ("sim", "auto")
    args = parse_args(["--node-runtime", "real"])
    assert args.node_runtime == "real"


def test_kubelet_choice_with_the_real_runtime_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--node-runtime", "real", "--kubelet", "stand-in"])
    assert exit_info.value.code == 2
    assert "--kubelet applies to --node-runtime sim only" in capsys.readouterr().err


def test_unknown_runtime_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--node-runtime", "kind"])
    assert "invalid choice: 'kind'" in capsys.readouterr().err


def test_banner_names_the_runtime_and_the_sim_kubelet() -> None:
    assert runtime_banner("sim", "stand-in").startswith("Node runtime: sim ")
    assert "kubelet: the demo's kubelet stand-in" in runtime_banner("sim", "stand-in")
    assert "kubelet: the kubelet's real device manager" in runtime_banner("sim", "device-manager")
    assert runtime_banner("real").startswith("Node runtime: real (kubelet, containerd and runc")


def test_missing_prerequisites_name_the_command_that_provides_each() -> None:
    missing = missing_prerequisites(
        is_root=False, host_problem="", k8s_problem="gone", node_problem="gone", has_node_image=False
    )
    assert [m.remedy for m in missing] == [
        "run the demo as root (sudo)",
        "test/k8s/build.sh",
        "test/node/build.sh",
        "make images",
    ]
    message = prerequisite_message(missing)
    assert "\n" not in message
    assert message.startswith("--node-runtime real needs root (run: run the demo as root (sudo)); ")
    assert "the node image archive (run: make images)" in message


def test_nothing_missing_and_host_problems_for_root() -> None:
    assert not missing_prerequisites(
        is_root=True, host_problem="", k8s_problem="", node_problem="", has_node_image=True
    )
    (only,) = missing_prerequisites(
        is_root=True, host_problem="no pids hierarchy", k8s_problem="", node_problem="", has_node_image=True
    )
    assert only == Missing("no pids hierarchy", "see docs/node.md")


def test_real_runtime_without_prerequisites_exits_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every probe looks in an empty place: one line, the commands, exit 2, no traceback."""
    monkeypatch.setenv("K8S_TEST_BIN_DIR", str(tmp_path / "k8s"))
    monkeypatch.setenv("NODE_TEST_BIN_DIR", str(tmp_path / "node"))
    monkeypatch.setenv("IMAGES_CACHE", str(tmp_path / "images"))
    assert main(["--node-runtime", "real"]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Node runtime: real")
    assert len(lines) == 2, lines
    for command in ("test/k8s/build.sh", "test/node/build.sh", "make images"):
        assert f"(run: {command})" in lines[1]


def test_the_shipped_demo_has_only_the_stand_in(capsys: pytest.CaptureFixture[str]) -> None:
    """Installed without the source tree, the demo says what needs a checkout instead of failing."""
    assert demo.main(["--node-runtime", "real"]) == 2
    assert capsys.readouterr().out.splitlines()[1] == f"--node-runtime real {demo.NEEDS_SOURCE_TREE}"
    kubelet, reason = demo.resolve_kubelet("auto")
    assert kubelet == "stand-in" and "package k8stest" in reason


def test_demo_module_does_not_import_the_test_tier() -> None:
    """The wheel ships without k8stest: importing the demo must not need it."""
    code = (
        "import sys, intel_device_plugins.sim.demo\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'k8stest']\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plan_runs_every_kind_of_the_profile() -> None:
    spec = parse_node_spec(profile_text("default"), "default profile")
    run, skipped = plan_kinds(spec)
    assert [plan.kind for plan in run] == ["gpu", "qat", "dsa", "iaa", "dlb", "npu", "sgx", "fpga"]
    assert skipped == {}
    (gpu,) = (plan for plan in run if plan.kind == "gpu")
    assert gpu.resources == ("gpu.intel.com/i915", "gpu.intel.com/xe", "gpu.intel.com/monitoring")


def test_a_kind_is_advertised_only_with_allocatable_devices() -> None:
    gpu = KindPlan("gpu", "gpu.intel.com", ("gpu.intel.com/i915", "gpu.intel.com/xe"))
    dsa = KindPlan("dsa", "dsa.intel.com", ())
    status = {"allocatable": {"gpu.intel.com/i915": "20", "dsa.intel.com/wq-user-shared": "0"}}
    assert not advertised(status, gpu)  # xe is still missing
    assert not advertised(status, dsa)  # registered, but nothing healthy
    status["allocatable"] |= {"gpu.intel.com/xe": "10", "dsa.intel.com/wq-user-dedicated": "1"}
    assert advertised(status, gpu) and advertised(status, dsa)


def test_resource_table_shows_only_device_resources() -> None:
    status = {
        "capacity": {"cpu": "2", "gpu.intel.com/i915": "20", "dsa.intel.com/wq-user-shared": "10"},
        "allocatable": {"cpu": "2", "gpu.intel.com/i915": "20", "dsa.intel.com/wq-user-shared": "0"},
    }
    table = resource_table(status, ["gpu.intel.com", "dsa.intel.com"]).splitlines()
    assert table[0].split() == ["RESOURCE", "CAPACITY", "ALLOCATABLE"]
    assert [row.split() for row in table[1:]] == [
        ["dsa.intel.com/wq-user-shared", "10", "0"],
        ["gpu.intel.com/i915", "20", "20"],
    ]


def test_pod_report_leaves_out_what_every_container_has() -> None:
    log = "\n".join(
        [
            "chardev /dev/null",
            "chardev /dev/pts/0",
            "link /dev/fd -> /proc/self/fd",
            "chardev /dev/dri/card1",
            "link /dev/dri/by-path/pci-0000:11:00.0-card -> ../card1",
            "env PATH=/bin",
            "env KUBERNETES_SERVICE_HOST=10.0.0.1",
            "env QAT0=0000:10:00.1",
        ]
    )
    assert describe_pod_output(log) == [
        "device node /dev/dri/card1",
        "symlink /dev/dri/by-path/pci-0000:11:00.0-card -> ../card1",
        "env QAT0=0000:10:00.1",
    ]
