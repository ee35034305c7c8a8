"""Each ``intel_<kind>_dra_driver``: its flags reach a profile that finds the kind's devices on a
simulated node; the device plugin's flags keep their meaning; bad input stops it before it starts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from intel_device_plugins.plugins.dlb import dracli as dlb
from intel_device_plugins.plugins.dsa import dracli as dsa
from intel_device_plugins.plugins.fpga import dracli as fpga
from intel_device_plugins.plugins.fpga.discovery import Mode as FpgaMode
from intel_device_plugins.plugins.iaa import dracli as iaa
from intel_device_plugins.plugins.idxd.discovery import DSA, IAA
from intel_device_plugins.plugins.npu import dracli as npu
from intel_device_plugins.plugins.qat import dracli as qat
from intel_device_plugins.plugins.qat.dra import QatDriverProfile, QatKernelDriverProfile
from intel_device_plugins.plugins.qat.kernel import parse_adf_status, run_command, scan_kernel
from intel_device_plugins.plugins.sgx import dracli as sgx
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.qat import ADF_CTL
from tests.builders import two_socket_node

# kind → (module, driver name, simulated node spec, device count the spec gives)
KINDS: dict[str, tuple[ModuleType, str, str, int]] = {
    "dsa": (dsa, "dsa.intel.com", "[[dsa]]\nwqs = 3\nwq_mode = 'mixed'\n", 3),
    "iaa": (iaa, "iaa.intel.com", "[[iaa]]\nwqs = 2\nwq_mode = 'shared'\n", 2),
    "dlb": (dlb, "dlb.intel.com", "[[dlb]]\ncount = 2\n", 2),
    "npu": (npu, "npu.intel.com", "[[npu]]\ncount = 1\n", 1),
    "sgx": (sgx, "sgx.intel.com", "[[sgx]]\nepc_bytes_per_node = 1073741824\n", 2),
    "fpga": (fpga, "fpga.intel.com", "[[fpga]]\ncount = 1\nports = 2\n", 2),
    "qat": (qat, "qat.intel.com", "[[qat]]\nvfs = 3\nservices = 'dc'\n", 3),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_profile_finds_the_kinds_devices_under_the_prefix(kind: str, tmp_path: Path) -> None:
    module, driver, spec, count = KINDS[kind]
    two_socket_node(tmp_path, spec)
    args = module.build_parser().parse_args(["-node-name=n", f"-prefix={tmp_path}"])

    profile = module.build_profile(args)
    inventory = profile.scan()

    assert profile.driver_name == driver
    assert len(inventory.devices) == count, inventory.problems
    assert f"intel_{kind}_dra_driver" == module.PROGRAM


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_empty_node_has_no_devices(kind: str, tmp_path: Path) -> None:
    module, _, _, _ = KINDS[kind]
    two_socket_node(tmp_path, "")
    args = module.build_parser().parse_args(["-node-name=n", f"-prefix={tmp_path}"])

    assert module.build_profile(args).scan().devices == ()


def test_dsa_and_iaa_share_the_work_queue_profile_with_their_own_kind() -> None:
    dsa_profile = dsa.build_profile(dsa.build_parser().parse_args(["-prefix=/p"]))
    iaa_profile = iaa.build_profile(iaa.build_parser().parse_args(["-prefix=/p"]))

    assert (dsa_profile.kind, iaa_profile.kind) == (DSA, IAA)
    assert dsa_profile.prefix == iaa_profile.prefix == "/p"


def test_qat_dpdk_flags_reach_the_plugin_the_driver_scans_with() -> None:
    args = qat.build_parser().parse_args(
        ["-dpdk-driver=vfio-pci", "-kernel-vf-drivers=4xxxvf", "-max-num-devices=5", "-prefix=/p"]
    )

    profile = qat.build_profile(args)

    assert isinstance(profile, QatDriverProfile)
    config = profile.plugin.config
    assert (config.dpdk_driver, config.kernel_vf_drivers, config.max_devices) == ("vfio-pci", ("4xxxvf",), 5)
    assert str(profile.plugin.paths.root) == "/p"


def test_qat_kernel_mode_publishes_process_slots() -> None:
    profile = qat.build_profile(qat.build_parser().parse_args(["-mode", "kernel"]))

    assert isinstance(profile, QatKernelDriverProfile)
    assert profile.driver_name == "qat.intel.com"


def test_qat_kernel_mode_reads_the_configuration_where_config_dir_says(tmp_path: Path) -> None:
    """The kernel-mode install mounts the host's /etc away from the container's own; -config-dir
    names it, and nothing else (sysfs, device nodes) moves with it."""
    tree = build_node(parse_node_spec(profile_text("qat-kernel"), "qat-kernel profile"), tmp_path / "node")
    moved = tmp_path / "host-etc"
    tree.path("/etc").rename(moved)
    status = run_command([str(tree.path(ADF_CTL)), "status"])
    args = qat.build_parser().parse_args(["-mode", "kernel", f"-prefix={tree.root}", f"-config-dir={moved}"])
    profile = qat.build_profile(args)
    assert isinstance(profile, QatKernelDriverProfile)
    assert profile.plugin.paths.config_file(parse_adf_status(status).devices[0]).parent == moved
    assert {
        resource: len(slots) for resource, slots in scan_kernel(profile.plugin.paths, status).tree.items()
    } == {
        "cy1_dc0": 4,
        "cy0_dc1": 4,
    }
    # Without it the configuration is looked for in <prefix>/etc, where there is none now.
    default = qat.build_profile(qat.build_parser().parse_args(["-mode", "kernel", f"-prefix={tree.root}"]))
    assert isinstance(default, QatKernelDriverProfile)
    assert scan_kernel(default.plugin.paths, status).tree == {}


def test_qat_max_num_devices_bounds_the_published_vfs(tmp_path: Path) -> None:
    two_socket_node(tmp_path, "[[qat]]\nvfs = 4\nservices = 'sym;asym'\n")
    args = qat.build_parser().parse_args([f"-prefix={tmp_path}", "-max-num-devices=2"])

    assert len(qat.build_profile(args).scan().devices) == 2


@pytest.mark.parametrize("mode", list(FpgaMode))
def test_fpga_mode_chooses_ports_or_regions(mode: FpgaMode, tmp_path: Path) -> None:
    two_socket_node(tmp_path, "[[fpga]]\ncount = 1\nports = 2\n")
    args = fpga.build_parser().parse_args([f"-prefix={tmp_path}", f"-mode={mode}"])

    profile = fpga.build_profile(args)
    devices = profile.scan().devices

    assert profile.mode is mode
    assert len(devices) == (2 if mode is FpgaMode.AF else 1)


@pytest.mark.parametrize(
    ("module", "argv", "named"),
    [
        (qat, ["-node-name=n", "-mode=vf"], "-mode"),
        (qat, ["-node-name=n", "-kernel-vf-drivers=e1000"], "unknown VF driver 'e1000'"),
        (qat, ["-node-name=n", "-max-num-devices=0"], "-max-num-devices"),
        (qat, ["-node-name=n", "-allocation-policy=packed"], "-allocation-policy"),
        (fpga, ["-node-name=n", "-mode=fabric"], "-mode"),
        (dsa, ["-node-name=n", "-driver=vfio-pci"], "-driver"),
        (npu, ["-node-name=n", "-shared-dev-num=2"], "-shared-dev-num"),
        (sgx, ["-node-name=n", "-enclave-limit=2"], "-enclave-limit"),
        (dlb, ["-kubeconfig=/nonexistent"], "-node-name is required"),
        (iaa, ["-node-name=n", "-kubeconfig=/nonexistent/kubeconfig"], "-kubeconfig /nonexistent/kubeconfig"),
    ],
)
def test_bad_input_exits_with_2_naming_it(
    module: ModuleType,
    argv: list[str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("POD_UID", raising=False)

    with pytest.raises(SystemExit) as exited:
        module.main(argv)

    assert exited.value.code == 2
    assert named in capsys.readouterr().err
