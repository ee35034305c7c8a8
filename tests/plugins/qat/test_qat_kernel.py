"""QAT kernel mode: ``adf_ctl status`` parsing, INI section rules, the tree and env renumbering."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceNode, default_allocation
from intel_device_plugins.dra.model import AllocatedDevice
from intel_device_plugins.plugins.qat.dra import QatKernelDriverProfile
from intel_device_plugins.plugins.qat.kernel import (
    AdfDevice,
    CommandError,
    KernelPaths,
    SectionConfig,
    merge_sections,
    parse_adf_status,
    parse_device_config,
    renumber_sections,
    run_command,
    scan_kernel,
    usable_devices,
)
from intel_device_plugins.plugins.qat.plugin import BackgroundCommand, QatKernelPlugin
from intel_device_plugins.sim.fakefs import FakeTree

STATUS = """\
Checking status of all devices.
There is 3 QAT acceleration device(s) in the system:
 qat_dev0 - type: c6xx,  inst_id: 0,  node_id: 0,  bsf: 0000:3d:00.0,  #accel: 5 #engines: 10 state: up
 qat_dev1 - type: c6xx,  inst_id: 1,  node_id: 0,  bsf: 3f:00.0,  #accel: 5 #engines: 10 state: up
 qat_dev2 - type: c6xx,  inst_id: 2,  node_id: 1,  bsf: 0000:da:00.0,  #accel: 5 #engines: 10 state: down
"""

CONFIG = """\
[GENERAL]
ServicesEnabled = cy;dc
ConfigVersion = 2

[KERNEL]
NumberCyInstances = 0
NumberDcInstances = 0

[SSL]
NumberCyInstances = 1
NumberDcInstances = 0
NumProcesses = 2
LimitDevAccess = 0

[PINNED]
NumberCyInstances = 2
NumberDcInstances = 1
NumProcesses = 1
LimitDevAccess = 1
"""


def node(tmp_path: Path, status: str = STATUS, configs: dict[str, str] | None = None) -> FakeTree:
    tree = FakeTree(tmp_path / "node")
    for device in parse_adf_status(status).devices:
        tree.mkdir(f"/sys/bus/pci/drivers/{device.type}/{device.address}/uio/uio{device.inst_id}")
        text = (configs or {}).get(device.id, CONFIG)
        tree.write(f"/etc/{device.type}_{device.id}.conf", text)
    tree.mkdir("/sys/class/iommu")
    return tree


def test_status_lines_are_parsed_with_and_without_domain() -> None:
    report = parse_adf_status(STATUS)
    assert report.devices == (
        AdfDevice("c6xx", 0, "0000:3d:00.0", "up"),
        AdfDevice("c6xx", 1, "0000:3f:00.0", "up"),
        AdfDevice("c6xx", 2, "0000:da:00.0", "down"),
    )
    assert report.problems == ()


def test_nonsense_device_lines_are_reported_and_skipped() -> None:
    report = parse_adf_status("qat_dev0 - something else entirely\n\x00\x01garbage\n" + STATUS)
    assert len(report.devices) == 3
    assert report.problems == (
        "adf_ctl status: unrecognised device line 'qat_dev0 - something else entirely'",
    )


def test_down_and_generation_4_devices_are_not_used() -> None:
    devices = [
        AdfDevice("c6xx", 0, "0000:3d:00.0", "up"),
        AdfDevice("c6xx", 1, "0000:3f:00.0", "down"),
        AdfDevice("4xxx", 2, "0000:6b:00.0", "up"),
        AdfDevice("4xxxvf", 3, "0000:6b:00.1", "up"),
    ]
    assert [d.inst_id for d in usable_devices(devices, iommu_on=False)] == [0]


def test_with_an_iommu_only_vfs_are_used() -> None:
    devices = [AdfDevice("c6xx", 0, "0000:3d:00.0", "up"), AdfDevice("c6xxvf", 1, "0000:3d:01.0", "up")]
    assert [d.type for d in usable_devices(devices, iommu_on=True)] == ["c6xxvf"]


def test_user_sections_are_read_and_kernel_sections_ignored() -> None:
    sections, problems = parse_device_config(CONFIG, "c6xx_dev0.conf")
    assert sections == {"SSL": SectionConfig(2, 1, 0, False), "PINNED": SectionConfig(1, 2, 1, True)}
    assert problems == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("NumberCyInstances = x\nNumberDcInstances = 0\nNumProcesses = 1\n", "is not an integer"),
        ("NumberCyInstances = 1\nNumProcesses = 1\n", "has no NumberDcInstances"),
        (
            "NumberCyInstances = 1\nNumberDcInstances = 0\nNumProcesses = 1\nLimitDevAccess = maybe\n",
            "boolean",
        ),
        ("NumberCyInstances = -1\nNumberDcInstances = 0\nNumProcesses = 1\n", "negative"),
    ],
)
def test_a_bad_section_is_skipped_with_a_problem(body: str, message: str) -> None:
    sections, problems = parse_device_config(CONFIG + "\n[BAD]\n" + body, "c6xx_dev0.conf")
    assert "BAD" not in sections and "SSL" in sections
    assert len(problems) == 1 and message in problems[0] and "[BAD]" in problems[0]


def test_an_unparsable_file_is_a_problem_not_a_crash() -> None:
    sections, problems = parse_device_config("no section header at all\n", "c6xx_dev0.conf")
    assert sections == {}
    assert problems and problems[0].startswith("c6xx_dev0.conf: cannot parse")


def test_sections_that_disagree_between_devices_are_dropped_alone() -> None:
    good = SectionConfig(2, 1, 0, False)
    merged, problems = merge_sections(
        [
            ("dev0", {"SSL": good, "DC": SectionConfig(1, 0, 1, False)}),
            ("dev1", {"SSL": good, "DC": SectionConfig(3, 0, 1, False)}),
        ]
    )
    assert [section.name for section in merged] == ["SSL"]
    assert problems == [
        "section [DC]: NumProcesses differs between devices (the section is not pinned); not advertised"
    ]


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        (SectionConfig(1, 1, 0, True), "LimitDevAccess differs"),
        (SectionConfig(1, 2, 0, False), "NumberCyInstances and NumberDcInstances differ"),
    ],
)
def test_section_consistency_rules(other: SectionConfig, reason: str) -> None:
    merged, problems = merge_sections(
        [("dev0", {"S": SectionConfig(1, 1, 0, False)}), ("dev1", {"S": other})]
    )
    assert merged == [] and reason in problems[0]


def test_a_pinned_section_must_exist_on_every_device() -> None:
    pinned = SectionConfig(1, 1, 0, True)
    merged, problems = merge_sections([("dev0", {"P": pinned}), ("dev1", {})])
    assert merged == [] and "missing on some devices" in problems[0]


def test_pinned_sections_differ_in_processes_freely() -> None:
    merged, _ = merge_sections(
        [("dev0", {"P": SectionConfig(1, 1, 0, True)}), ("dev1", {"P": SectionConfig(2, 1, 0, True)})]
    )
    assert [(e.device, e.processes) for e in merged[0].endpoints] == [("dev0", 1), ("dev1", 2)]


def test_tree_has_one_id_per_process_and_unpinned_sections_on_the_first_device(tmp_path: Path) -> None:
    tree = node(tmp_path)
    result = scan_kernel(KernelPaths(tree.root), STATUS)
    assert sorted(result.tree) == ["cy1_dc0", "cy2_dc1"]
    assert sorted(result.tree["cy1_dc0"]) == ["SSL_dev0_0", "SSL_dev0_1"]
    assert sorted(result.tree["cy2_dc1"]) == ["PINNED_dev0_0", "PINNED_dev1_0"]
    info = result.tree["cy1_dc0"]["SSL_dev0_1"]
    assert info.envs["QAT_SECTION_NAME"] == "SSL"
    root = str(tree.root)
    assert info.nodes == (
        DeviceNode(f"{root}/dev/qat_adf_ctl", f"{root}/dev/qat_adf_ctl"),
        DeviceNode(f"{root}/dev/qat_dev_processes", f"{root}/dev/qat_dev_processes"),
        DeviceNode(f"{root}/dev/usdm_drv", f"{root}/dev/usdm_drv"),
        DeviceNode(f"{root}/dev/uio0", f"{root}/dev/uio0"),
        DeviceNode(f"{root}/dev/uio1", f"{root}/dev/uio1"),
    )
    assert result.problems == ()


def test_a_device_with_unreadable_config_is_left_out_and_the_rest_served(tmp_path: Path) -> None:
    tree = node(tmp_path)
    tree.remove("/etc/c6xx_dev1.conf")
    result = scan_kernel(KernelPaths(tree.root), STATUS)
    assert sorted(result.tree["cy2_dc1"]) == ["PINNED_dev0_0"]
    assert any(p.startswith("dev1 (0000:3f:00.0): cannot read") for p in result.problems)


def test_a_device_without_uio_directory_is_left_out(tmp_path: Path) -> None:
    tree = node(tmp_path)
    tree.remove("/sys/bus/pci/drivers/c6xx/0000:3d:00.0")
    result = scan_kernel(KernelPaths(tree.root), STATUS)
    assert sorted(result.tree["cy1_dc0"]) == ["SSL_dev1_0", "SSL_dev1_1"]
    assert any(p.startswith("dev0 (0000:3d:00.0)") for p in result.problems)


def test_section_envs_are_renumbered_from_zero_per_container(tmp_path: Path) -> None:
    devices = scan_kernel(KernelPaths(node(tmp_path).root), STATUS).tree["cy2_dc1"]
    ids = ["PINNED_dev1_0", "PINNED_dev0_0"]
    allocation = renumber_sections("cy2_dc1", devices, ids, default_allocation(devices, ids))
    assert dict(allocation.envs) == {
        "QAT_SECTION_NAME_cy2_dc1_0": "PINNED",
        "QAT_SECTION_NAME_cy2_dc1_1": "PINNED",
        "QAT_SECTION_NAME": "PINNED",
    }
    single = renumber_sections("cy2_dc1", devices, ids[1:], default_allocation(devices, ids[1:]))
    assert set(single.envs) == {"QAT_SECTION_NAME_cy2_dc1_0", "QAT_SECTION_NAME"}


class Runner:
    """Stands in for running ``adf_ctl``: returns canned output or raises."""

    def __init__(self, output: str = STATUS, error: Exception | None = None) -> None:
        self.output = output
        self.error = error
        self.argv: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        self.argv.append(list(argv))
        if self.error is not None:
            raise self.error
        return self.output


def test_the_plugin_runs_adf_ctl_status(tmp_path: Path) -> None:
    runner = Runner()
    plugin = QatKernelPlugin(KernelPaths(node(tmp_path).root), runner)
    assert sorted(plugin.scan()) == ["cy1_dc0", "cy2_dc1"]
    assert runner.argv == [["adf_ctl", "status"]]


def test_a_failing_adf_ctl_fails_the_scan_with_a_clear_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = QatKernelPlugin(
        KernelPaths(node(tmp_path).root), Runner(error=CommandError("adf_ctl status exited with 1: boom"))
    )
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match=r"failed: .*boom"):
        plugin.scan()
    assert "adf_ctl status: adf_ctl status exited with 1: boom" in caplog.text


def test_adf_ctl_printing_nonsense_gives_no_devices_and_a_problem(tmp_path: Path) -> None:
    plugin = QatKernelPlugin(KernelPaths(node(tmp_path).root), Runner("qat_dev0 ??? \n"))
    assert plugin.scan() == {}
    assert any("unrecognised device line" in p for p in plugin.problems.current)


def test_run_command_reports_exit_code_and_output() -> None:
    with pytest.raises(CommandError, match="exited with 3: oops"):
        run_command(["sh", "-c", "echo oops; exit 3"])
    assert run_command(["sh", "-c", "echo fine"]) == "fine\n"


def test_run_command_for_a_missing_program_raises_oserror() -> None:
    with pytest.raises(OSError):
        run_command(["/nonexistent/adf_ctl", "status"])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class GatedRunner:
    """Answers ``output-<n>`` for the n-th run; a run from the second on waits until released."""

    def __init__(self) -> None:
        self.runs = 0
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, argv: Sequence[str]) -> str:
        self.runs += 1
        if self.runs > 1:
            self.release.wait(10)
        self.finished.set()
        return f"output-{self.runs}"


def test_adf_ctl_runs_off_the_event_loop_at_most_every_refresh_interval() -> None:
    runner, clock = GatedRunner(), Clock()
    command = BackgroundCommand(runner, ["adf_ctl", "status"], refresh=5, clock=clock)
    assert command.latest() == "output-1"
    clock.now = 4.9
    assert command.latest() == "output-1"
    assert runner.runs == 1
    clock.now = 5.0
    runner.finished.clear()
    # The second run hangs; scans keep getting the last answer instead of waiting for it.
    assert command.latest() == "output-1"
    assert command.latest() == "output-1"
    runner.release.set()
    assert runner.finished.wait(10)
    for _ in range(1000):
        if command.latest() == "output-2":
            break
        threading.Event().wait(0.01)
    assert command.latest() == "output-2"
    assert runner.runs == 2


def test_a_first_adf_ctl_that_never_answers_is_an_error() -> None:
    hung = threading.Event()

    def runner(argv: Sequence[str]) -> str:
        hung.wait(10)
        return ""

    command = BackgroundCommand(runner, ["adf_ctl", "status"])
    with pytest.raises(CommandError, match="no answer"):
        command.latest(first_wait=0.05)
    hung.set()


def test_the_dra_driver_publishes_each_process_slot_and_numbers_sections_per_claim(tmp_path: Path) -> None:
    profile = QatKernelDriverProfile(QatKernelPlugin(KernelPaths(node(tmp_path).root), Runner()))
    devices = profile.scan().by_name()
    assert {"ssl-dev0-0", "ssl-dev0-1", "pinned-dev0-0", "pinned-dev1-0"} <= set(devices)
    pinned = devices["pinned-dev1-0"]
    assert dict(pinned.attributes) == {"resource": "cy2_dc1", "section": "PINNED", "device": "dev1"}
    assert any(node.container_path.endswith("/dev/qat_adf_ctl") for node in pinned.cdi.nodes)  # type: ignore[union-attr]
    chosen = [devices["pinned-dev1-0"], devices["ssl-dev0-1"], devices["pinned-dev0-0"]]
    edits = profile.claim_edits("u", [(AllocatedDevice("r", "n", d.name), d) for d in chosen])
    assert [edit.env for edit in edits] == [
        ("QAT_SECTION_NAME_cy2_dc1_0=PINNED", "QAT_SECTION_NAME=PINNED"),
        ("QAT_SECTION_NAME_cy1_dc0_0=SSL", "QAT_SECTION_NAME=SSL"),
        ("QAT_SECTION_NAME_cy2_dc1_1=PINNED", "QAT_SECTION_NAME=PINNED"),
    ]
