"""fpga_tool: every command against a simulated node, flags, messages and exit codes."""

from __future__ import annotations

import io
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga import fme, fpgatool
from intel_device_plugins.plugins.fpga.bitstream import build
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.process import console_script

IFACE = simfpga.ARRIA10_INTERFACE
NLB0 = simfpga.NLB0_AFU
NLB3 = simfpga.NLB3_AFU
STORE = "/srv/intel.com/fpga"


@dataclass
class Node:
    root: Path
    card: simfpga.SimulatedFpga
    other: simfpga.SimulatedFpga
    gbs: Path
    aocx: Path
    simulated: fme.SimulatedFme

    def run(self, *argv: str) -> tuple[int, str, str]:
        out = io.StringIO()
        err = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stderr", err)
            code = fpgatool.main(["-prefix", str(self.root), *argv], io=self.simulated, out=out)
        return code, out.getvalue(), err.getvalue()

    def afu(self, port: simfpga.SimulatedPort) -> str:
        return (self.root / port.sysfs.lstrip("/") / "afu_id").read_text().strip()


@pytest.fixture(params=[simfpga.DFL, simfpga.OPAE])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Node:
    root = tmp_path / "node"
    tree = FakeTree(root)
    card = simfpga.add_fpga(tree, driver=request.param, ports=1, vfs=1)
    other = simfpga.add_fpga(tree, driver=request.param, interface_id="bfac4d851ee856fe8c95865ce1bbaa2d")
    gbs = tmp_path / "nlb3.gbs"
    gbs.write_bytes(build.gbs_bytes(build.gbs_metadata(IFACE, NLB3), fme.simulated_payload(NLB3)))
    aocx = tmp_path / "kernel.aocx"
    opencl = build.gbs_bytes(
        build.gbs_metadata(IFACE, build.OPENCL_AFU), fme.simulated_payload(build.OPENCL_AFU)
    )
    aocx.write_bytes(build.aocx_bytes(opencl, "c0ffee"))
    return Node(root, card, other, gbs, aocx, fme.SimulatedFme(root))


def test_no_command(node: Node) -> None:
    code, _, err = node.run()
    assert code == 1
    assert err.strip() == (
        "Please provide command: info, fpgainfo, install, list, fmeinfo, portinfo, "
        "list-fme, list-port, pr, release, assign"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["info"], "Invalid arguments: bitstream filename is missing"),
        (["install"], "Invalid arguments: bitstream filename is missing"),
        (["-b", "x.gbs", "pr"], "Invalid arguments: FPGA device name is missing"),
        (["fmeinfo"], "Invalid arguments: FPGA device name is missing"),
        (["release"], "Invalid arguments: FPGA device name is missing"),
        (["frobnicate", "now"], "unknown command [frobnicate now]"),
        (["-d", "/dev/sda", "fpgainfo"], "unknown FPGA device file /dev/sda"),
        (["-b", "/nonexistent/x.gbs", "info"], "/nonexistent/x.gbs: No such file or directory"),
        (["-b", "x.rbf", "info"], "x.rbf: unsupported file format x.rbf"),
    ],
)
def test_argument_errors(node: Node, argv: list[str], message: str) -> None:
    code, _, err = node.run(*argv)
    assert code == 1
    assert err.strip() == message


def test_info_gbs(node: Node) -> None:
    code, out, _ = node.run("-b", str(node.gbs), "info")
    assert code == 0
    assert out == (
        f'Bitstream file        : "{node.gbs}"\n'
        f'Interface UUID        : "{IFACE}"\n'
        f'Accelerator Type UUID : "{NLB3}"\n'
        f'Unique UUID           : "{NLB3}"\n'
        f'Installation Path     : "{STORE}/{IFACE}/{NLB3}.gbs"\n'
        "Extra:\n"
        '\tSize : "4096"\n'
    )
    _, quiet, _ = node.run("-q", "-b", str(node.gbs), "info")
    assert "Extra" not in quiet and "Installation Path" in quiet


def test_info_aocx(node: Node) -> None:
    code, out, _ = node.run("-b", str(node.aocx), "info")
    assert code == 0
    assert f'Unique UUID           : "c0ffee"\nInstallation Path     : "{STORE}/{IFACE}/c0ffee.aocx"' in out
    assert (
        '\tBoard : "pac_a10"\n\tHash : "c0ffee"\n\tSize : "4096"\n'
        '\tTarget : "arria10"\n\tVersion : "20.3.0"\n' in out
    )


def test_install_copies_refuses_overwrite_and_force_replaces(node: Node) -> None:
    target = node.root / STORE.lstrip("/") / IFACE / f"{NLB3}.gbs"
    code, out, _ = node.run("-b", str(node.gbs), "install")
    assert code == 0
    assert out == f'Installing bitstream "{node.gbs}" as "{target}"\n'
    assert target.read_bytes() == node.gbs.read_bytes()
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert oct(target.parent.stat().st_mode & 0o777) == "0o755"
    code, _, err = node.run("-b", str(node.gbs), "install")
    assert code == 1
    assert err.strip() == f'destination file "{target}" already exist. Use --force to overwrite it'
    target.write_bytes(b"old")
    code, _, _ = node.run("-force", "-b", str(node.gbs), "install")
    assert code == 0
    assert target.read_bytes() == node.gbs.read_bytes()
    assert [name for name in os.listdir(target.parent) if name.startswith(".install-")] == []


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_install_dry_run_never_copies(node: Node, quiet: list[str]) -> None:
    code, out, _ = node.run(*quiet, "-dry-run", "-b", str(node.gbs), "install")
    assert code == 0
    assert ("Dry-run: no copying performed" in out) == (not quiet)
    assert not (node.root / STORE.lstrip("/")).exists()


def test_install_refuses_ids_that_leave_the_store(node: Node, tmp_path: Path) -> None:
    evil = tmp_path / "evil.gbs"
    evil.write_bytes(build.gbs_bytes(build.gbs_metadata("../../../etc", NLB3), b"x"))
    code, _, err = node.run("-b", str(evil), "install")
    assert code == 1
    assert err.strip() == f"{evil}: interface ID '../../../etc' cannot name a file in the bitstream store"


def test_list(node: Node) -> None:
    prefix = "dfl-" if node.card.driver == simfpga.DFL else "intel-fpga-"
    code, out, _ = node.run("list")
    assert code == 0
    assert out == (
        f"Detected FPGA FMEs: 2\n{prefix}fme.0\n{prefix}fme.1\n"
        f"Detected FPGA Ports: 3\n{prefix}port.0\n{prefix}port.1\n{prefix}port.2\n"
    )
    assert node.run("-q", "list-fme")[1] == f"{prefix}fme.0\n{prefix}fme.1\n"
    assert node.run("list-port")[1].startswith("Detected FPGA Ports: 3\n")


def test_fmeinfo(node: Node) -> None:
    device = f"/dev/{node.card.fme}"
    code, out, _ = node.run("-d", device, "fmeinfo")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "//****** FME ******//"
    assert f"Name                             : {node.card.fme}" in lines
    assert f"PCIe s:b:d:f                     : {node.card.address}" in lines
    assert f"Interface UUID                   : {IFACE}" in lines
    assert "SR-IOV Virtual Functions         : 1" in lines
    assert "Kernel API Version               : 0" in lines
    code, fpgainfo, _ = node.run("-d", device, "fpgainfo")
    assert (code, fpgainfo) == (0, out)
    code, bare, _ = node.run("-d", node.card.fme, "fmeinfo")
    assert code == 0
    assert [line for line in bare.splitlines() if not line.startswith("Device Node")] == [
        line for line in lines if not line.startswith("Device Node")
    ]
    _, quiet, _ = node.run("-q", "-d", device, "fmeinfo")
    assert "Kernel API Version" not in quiet and f"Interface UUID                   : {IFACE}" in quiet


def test_portinfo_of_a_vf_port(node: Node) -> None:
    vf_port = node.card.ports[-1]
    code, out, _ = node.run("-d", f"/dev/{vf_port.name}", "portinfo")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "//****** PORT ******//"
    assert f"Physical Function PCIe s:b:d:f   : {node.card.address}" in lines
    assert f"FME Name                         : {node.card.fme}" in lines
    assert f"Port Id                          : {vf_port.port_id}" in lines
    assert f"Accelerator UUID                 : {NLB0}" in lines
    assert "Port Regions                     : 1" in lines
    assert "Port Region (Index/Size/Offset)  : 0 / 262144 / 0" in lines
    assert (
        node.run("-d", f"/dev/{node.card.fme}", "portinfo")[2].strip()
        == f"unknown FPGA device file /dev/{node.card.fme}"
    )


def test_pr_programs_and_reports(node: Node) -> None:
    port = node.card.ports[0]
    code, out, _ = node.run("-d", f"/dev/{port.name}", "-b", str(node.gbs), "pr")
    assert code == 0
    assert out == (
        f'Before: Interface ID: "{IFACE}" AFU ID: "{NLB0}"\n'
        f'Programming "{node.gbs}" to port "/dev/{port.name}": OK\n'
        f'After : Interface ID: "{IFACE}" AFU ID: "{NLB3}"\n'
    )
    assert node.afu(port) == NLB3


def test_pr_dry_run_and_quiet(node: Node) -> None:
    port = node.card.ports[0]
    code, out, _ = node.run("-dry-run=true", "-d", f"/dev/{port.name}", "-b", str(node.gbs), "pr")
    assert code == 0 and ": OK\n" in out
    assert node.afu(port) == NLB0
    code, out, _ = node.run("-q", "-d", f"/dev/{port.name}", "-b", str(node.aocx), "pr")
    assert (code, out) == (0, "")
    assert node.afu(port) == build.OPENCL_AFU


def test_pr_interface_mismatch_fails(node: Node) -> None:
    port = node.other.ports[0]
    code, out, err = node.run("-d", f"/dev/{port.name}", "-b", str(node.gbs), "pr")
    assert code == 1
    assert (
        ": FAILED\n" in out
        and f'After : Interface ID: "bfac4d851ee856fe8c95865ce1bbaa2d" AFU ID: "{NLB0}"' in out
    )
    assert err.strip() == (
        'FME interface UUID "bfac4d851ee856fe8c95865ce1bbaa2d" is not compatible with '
        f'bitstream UUID "{IFACE}"'
    )
    assert node.afu(port) == NLB0


def test_pr_of_a_corrupt_bitstream_fails(node: Node, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.gbs"
    corrupt.write_bytes(build.gbs_bytes(build.gbs_metadata(IFACE, NLB3), b"garbage"))
    port = node.card.ports[0]
    code, _, err = node.run("-q", "-d", f"/dev/{port.name}", "-b", str(corrupt), "pr")
    assert code == 1
    assert "Input/output error" in err


def test_release_and_assign(node: Node) -> None:
    device = f"/dev/{node.card.fme}"
    assert node.run("-d", device, "-p", "0", "release") == (0, "", "")
    code, _, err = node.run("-d", device, "-p", "0", "release")
    assert code == 1 and "release of port 0" in err and "busy" in err
    assert node.run("-d", device, "assign") == (0, "", "")
    code, _, err = node.run("-d", device, "-p", "7", "assign")
    assert code == 1 and "assign of port 7" in err
    code, _, err = node.run("-d", f"/dev/{node.card.ports[0].name}", "release")
    assert code == 1 and "unknown FPGA FME" in err


def test_go_bool_flags() -> None:
    assert fpgatool.go_bool_flags(["-q", "list"], fpgatool.BOOL_FLAGS) == ["-q", "list"]
    assert fpgatool.go_bool_flags(["-q=false", "--force=true", "-d=/x"], fpgatool.BOOL_FLAGS) == [
        "-force",
        "-d=/x",
    ]
    assert fpgatool.go_bool_flags(["--", "-q=true"], fpgatool.BOOL_FLAGS) == ["--", "-q=true"]


def test_console_script(node: Node) -> None:
    script = console_script("fpga_tool")
    listed = subprocess.run(
        [script, "-prefix", str(node.root), "-q", "list-port"], capture_output=True, text=True
    )
    assert listed.returncode == 0
    assert len(listed.stdout.splitlines()) == 3
    port = node.card.ports[0]
    programmed = subprocess.run(
        [
            script,
            "--prefix",
            str(node.root),
            "--simulate",
            "-d",
            f"/dev/{port.name}",
            "-b",
            str(node.gbs),
            "pr",
        ],
        capture_output=True,
        text=True,
    )
    assert programmed.returncode == 0, programmed.stderr
    assert node.afu(port) == NLB3
    missing = subprocess.run([script], capture_output=True, text=True)
    assert missing.returncode == 1
    assert missing.stderr.startswith("Please provide command: info,")


@pytest.mark.parametrize(
    ("interface", "afu"), [("", NLB3), (IFACE, "")], ids=["no interface ID", "no AFU ID"]
)
def test_info_shows_every_field_of_a_gbs_with_an_empty_id_and_install_refuses_it(
    node: Node, tmp_path: Path, interface: str, afu: str
) -> None:
    path = tmp_path / "incomplete.gbs"
    path.write_bytes(build.gbs_bytes(build.gbs_metadata(interface, afu), b"x" * 10))
    code, out, err = node.run("-b", str(path), "info")
    assert (code, err) == (0, "")
    assert out == (
        f'Bitstream file        : "{path}"\n'
        f'Interface UUID        : "{interface}"\n'
        f'Accelerator Type UUID : "{afu}"\n'
        f'Unique UUID           : "{afu}"\n'
        'Installation Path     : ""\n'
        "Extra:\n"
        '\tSize : "10"\n'
    )
    code, out, err = node.run("-dry-run", "-b", str(path), "install")
    assert (code, err) == (0, "")
    missing = "interface ID ''" if not interface else "unique ID ''"
    assert out == (
        f'Installing bitstream "{path}" as ""\n'
        f"Dry-run: no copying performed; install refuses this file: {missing} cannot name a file in the "
        "bitstream store\n"
    )
    code, _, err = node.run("-b", str(path), "install")
    assert code == 1
    assert err.strip() == f"{path}: {missing} cannot name a file in the bitstream store"
    assert not (node.root / STORE.lstrip("/")).exists()


def test_info_shows_every_field_of_an_aocx_without_a_hash(node: Node, tmp_path: Path) -> None:
    path = tmp_path / "nohash.aocx"
    opencl = build.gbs_bytes(build.gbs_metadata(IFACE, build.OPENCL_AFU), b"x" * 10)
    path.write_bytes(build.aocx_bytes(opencl, ""))
    code, out, err = node.run("-b", str(path), "info")
    assert (code, err) == (0, "")
    assert 'Unique UUID           : ""\nInstallation Path     : ""\nExtra:\n' in out
    assert '\tHash : ""\n' in out
    code, _, err = node.run("-b", str(path), "install")
    assert code == 1 and "unique ID '' cannot name a file in the bitstream store" in err
