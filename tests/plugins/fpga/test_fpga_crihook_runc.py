"""intel_fpga_crihook run by a real OCI runtime (runc) as a ``createRuntime`` hook.

runc creates the container with the FPGA port among its devices, runs the hook with the OCI state
on standard input, and starts the container's process only if the hook exits 0. The port and its
FME are simulated (``-prefix``/``-simulate``); runc and the container are real. Needs root, runc
and a statically linked busybox for the container's process: with CI=true their absence fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga import fme
from intel_device_plugins.plugins.fpga.bitstream import build
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.process import console_script
from k8stest.binaries import in_ci

IFACE = simfpga.ARRIA10_INTERFACE
BUSYBOX = "/bin/busybox"


def _unavailable(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class Runtime:
    runc: str
    state: Path
    root: Path
    card: simfpga.SimulatedFpga
    base: Path

    def run(self, name: str, env: list[str], port: simfpga.SimulatedPort) -> subprocess.CompletedProcess[str]:
        bundle = self.base / name
        (bundle / "rootfs/bin").mkdir(parents=True)
        shutil.copy(BUSYBOX, bundle / "rootfs/bin/busybox")
        major, minor = simfpga.PORT_MAJOR[self.card.driver], int(port.name.rsplit(".", 1)[1])
        hook = console_script("intel_fpga_crihook")
        config = {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": 0, "gid": 0},
                "args": ["/bin/busybox", "ls", f"/dev/{port.name}"],
                "env": ["PATH=/bin", *env],
                "cwd": "/",
            },
            "root": {"path": "rootfs"},
            "hostname": "fpga",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {
                    "destination": "/dev",
                    "type": "tmpfs",
                    "source": "tmpfs",
                    "options": ["nosuid", "mode=755"],
                },
            ],
            "hooks": {
                "createRuntime": [
                    {"path": hook, "args": [hook, "-prefix", str(self.root), "-simulate", "-v", "1"]}
                ]
            },
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}],
                "devices": [
                    {
                        "path": f"/dev/{port.name}",
                        "type": "c",
                        "major": major,
                        "minor": minor,
                        "fileMode": 0o600,
                    }
                ],
                "resources": {
                    "devices": [
                        {"allow": False, "access": "rwm"},
                        {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rw"},
                    ]
                },
            },
        }
        (bundle / "config.json").write_text(json.dumps(config))
        container = f"fpga-hook-{os.getpid()}-{name}"
        try:
            return subprocess.run(
                [self.runc, "--root", str(self.state), "run", "--bundle", str(bundle), container],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            subprocess.run(
                [self.runc, "--root", str(self.state), "delete", "--force", container],
                capture_output=True,
                check=False,
            )

    def afu(self, port: simfpga.SimulatedPort) -> str:
        return (self.root / port.sysfs.lstrip("/") / "afu_id").read_text().strip()


@pytest.fixture(params=[simfpga.DFL, simfpga.OPAE])
def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Runtime:
    if os.geteuid() != 0:
        _unavailable("running containers with runc needs root")
    runc = shutil.which("runc")
    if runc is None:
        _unavailable("runc is not installed (Debian package runc)")
    if not os.access(BUSYBOX, os.X_OK):
        _unavailable(f"{BUSYBOX} is missing (Debian package busybox-static)")
    assert runc is not None
    root = tmp_path / "node"
    card = simfpga.add_fpga(FakeTree(root), driver=request.param, ports=2)
    build.install_simulated_gbs(root, IFACE, simfpga.NLB3_AFU, fme.simulated_payload(simfpga.NLB3_AFU))
    state = tmp_path / "runc"
    state.mkdir()
    return Runtime(runc, state, root, card, tmp_path)


def test_runc_runs_the_hook_which_programs_the_port_before_the_container_starts(runtime: Runtime) -> None:
    port = runtime.card.ports[1]
    result = runtime.run("ok", [f"FPGA_REGION_0={IFACE}", f"FPGA_AFU_0={simfpga.NLB3_AFU}"], port)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"/dev/{port.name}"  # the container ran and saw its port
    assert runtime.afu(port) == simfpga.NLB3_AFU
    assert runtime.afu(runtime.card.ports[0]) == simfpga.NLB0_AFU


def test_runc_does_not_start_the_container_when_the_hook_fails(runtime: Runtime) -> None:
    port = runtime.card.ports[0]
    result = runtime.run("missing", [f"FPGA_REGION_0={IFACE}", "FPGA_AFU_0=" + "a" * 32], port)
    assert result.returncode != 0
    assert result.stdout == ""  # the container's process never ran
    assert f"{IFACE}/{'a' * 32}: bitstream not found" in result.stderr
    assert runtime.afu(port) == simfpga.NLB0_AFU
