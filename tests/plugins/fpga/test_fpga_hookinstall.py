"""intel_fpga_hook_install: bundle layout, idempotence, refusal of paths that leave the target, and the
installed launcher driving the hook against a simulated node with an empty environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from intel_device_plugins.plugins.fpga import fme, hookinstall
from intel_device_plugins.plugins.fpga.bitstream import build
from intel_device_plugins.plugins.fpga.hookinstall import InstallError
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree

IFACE = simfpga.ARRIA10_INTERFACE


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> hookinstall.InstallResult:
    return hookinstall.install(tmp_path_factory.mktemp("host") / "fpga-sw")


def bundle_files(result: hookinstall.InstallResult) -> set[str]:
    return {
        p.relative_to(result.bundle).as_posix()
        for p in result.bundle.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_bundle_holds_interpreter_loader_libraries_and_only_the_hooks_modules(
    installed: hookinstall.InstallResult,
) -> None:
    target = installed.launcher.parent
    assert sorted(p.name for p in target.iterdir()) == sorted([installed.bundle.name, "intel-fpga-crihook"])
    files = bundle_files(installed)
    assert "bin/python3.11" in files
    assert "lib/python3.11/os.py" in files  # the landmark that makes the interpreter find its stdlib
    assert any(f.startswith("lib/ld-linux") for f in files)
    assert "lib/libc.so.6" in files
    assert "lib/python3.11/intel_device_plugins/plugins/fpga/crihook.py" in files
    # Only what the hook imports: no plugin server, gRPC, operator or test tooling.
    assert not any(f.startswith(("lib/python3.11/grpc", "lib/python3.11/asyncio")) for f in files)
    assert not any("/operator/" in f or "/deviceplugin/server" in f or "/sim/" in f for f in files)
    assert installed.changed and installed.size_bytes == sum(
        p.stat().st_size for p in installed.bundle.rglob("*") if p.is_file() and not p.is_symlink()
    )
    launcher = installed.launcher.read_text()
    assert launcher.startswith("#!/bin/sh\n")
    assert f"'{installed.bundle}/lib/ld-linux" in launcher and " -I -S -B -m " in launcher
    assert os.access(installed.launcher, os.X_OK)


def test_installing_again_changes_nothing(installed: hookinstall.InstallResult) -> None:
    target = installed.launcher.parent
    before = installed.launcher.stat().st_mtime_ns
    again = hookinstall.install(target)
    assert not again.changed
    assert again.bundle == installed.bundle and again.size_bytes == installed.size_bytes
    assert installed.launcher.stat().st_mtime_ns == before


def test_stale_bundles_go_and_a_symlinked_launcher_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "fpga-sw"
    target.mkdir()
    (target / "crihook.0000").mkdir()
    (target / "crihook.0000" / "old").write_text("x")
    outside = tmp_path / "outside"
    outside.write_text("keep")
    (target / "intel-fpga-crihook").symlink_to(outside)
    result = hookinstall.install(target)
    assert result.changed
    assert not (target / "crihook.0000").exists()
    assert outside.read_text() == "keep"
    assert not result.launcher.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fpga-sw", "outside"]


@pytest.mark.parametrize("target", ["relative/dir", "/opt/intel/../../tmp/x"])
def test_target_must_be_absolute_without_dotdot(target: str) -> None:
    with pytest.raises(InstallError, match=r"absolute path without '\.\.'"):
        hookinstall.install(Path(target))


def test_symlinked_target_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(InstallError, match="symbolic link"):
        hookinstall.install(tmp_path / "link")
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("dest", ["../escape", "/etc/passwd", "lib/../../x"])
def test_destinations_leaving_the_bundle_are_refused(dest: str) -> None:
    with pytest.raises(InstallError, match="leaves the bundle"):
        hookinstall.check_relative(PurePosixPath(dest))


def test_a_module_outside_the_search_path_is_refused(tmp_path: Path) -> None:
    stdlib = tmp_path / "stdlib"
    stdlib.mkdir()
    (stdlib / "os.py").write_text("")
    probed = {"files": ["/somewhere/else/evil.py"], "objects": [], "path": [str(stdlib)]}
    with pytest.raises(InstallError, match=r"/somewhere/else/evil\.py: module outside"):
        hookinstall.plan_bundle(Path("/usr/bin/python3.11"), probed)


def test_main_reports_errors_and_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert hookinstall.main(["--target", "relative"]) == 1
    assert "intel_fpga_hook_install: relative: the target directory" in capsys.readouterr().err
    assert hookinstall.main(["--target", str(tmp_path / "t")]) == 0
    assert "intel-fpga-crihook: installed (crihook." in capsys.readouterr().out
    assert hookinstall.main(["--target", str(tmp_path / "t")]) == 0
    assert ": already installed (crihook." in capsys.readouterr().out


def test_installed_launcher_programs_a_simulated_port_with_an_empty_environment(
    installed: hookinstall.InstallResult, tmp_path: Path
) -> None:
    root = tmp_path / "node"
    card = simfpga.add_fpga(FakeTree(root), driver=simfpga.DFL, ports=2)
    build.install_simulated_gbs(root, IFACE, simfpga.NLB3_AFU, fme.simulated_payload(simfpga.NLB3_AFU))
    port = card.ports[1]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    device = {
        "path": f"/dev/{port.name}",
        "type": "c",
        "major": simfpga.PORT_MAJOR[card.driver],
        "minor": int(port.name.rsplit(".", 1)[1]),
    }
    config = {
        "process": {"env": [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={simfpga.NLB3_AFU}"]},
        "linux": {"devices": [device]},
    }
    (bundle / "config.json").write_text(json.dumps(config))
    state = json.dumps({"ociVersion": "1.2.0", "id": "c", "status": "creating", "bundle": str(bundle)})
    result = subprocess.run(
        [str(installed.launcher), "-prefix", str(root), "-simulate"],
        input=state,
        capture_output=True,
        text=True,
        env={},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (root / port.sysfs.lstrip("/") / "afu_id").read_text().strip() == simfpga.NLB3_AFU
    failed = subprocess.run(
        [str(installed.launcher), "-prefix", str(root)], input="{}", capture_output=True, text=True, env={}
    )
    assert failed.returncode == 1
    assert failed.stderr.strip() == "intel_fpga_crihook: 'bundle' field is not set in the stdin JSON"


def test_bundled_loader_finds_every_library_inside_the_bundle(installed: hookinstall.InstallResult) -> None:
    # Programs ask for sonames (libz.so.1), the bundle copies real files (libz.so.1.2.13): the aliases must
    # be there, or the loader would quietly fall back to the host's libraries.
    bundle = installed.bundle
    (loader,) = (bundle / "lib").glob("ld-linux*")
    objects = [bundle / "bin" / "python3.11", *(bundle / "lib" / "python3.11" / "lib-dynload").glob("*.so")]
    assert len(objects) > 3
    for obj in objects:
        listed = subprocess.run(
            [str(loader), "--library-path", str(bundle / "lib"), "--list", str(obj)],
            capture_output=True,
            text=True,
            env={},
            check=True,
        ).stdout
        resolved = [line.split("=>")[1].split("(")[0].strip() for line in listed.splitlines() if "=>" in line]
        assert resolved or obj.suffix == ".so", listed  # an extension module may need nothing
        assert all(path.startswith(f"{bundle}/lib/") for path in resolved), listed
