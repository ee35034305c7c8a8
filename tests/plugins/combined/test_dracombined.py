"""``intel_dra_drivers``: ``--driver 'kind flags…'`` builds each kind's profile with the shared flags
given once; what cannot run together is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.cli import driver_config
from intel_device_plugins.plugins.dracombined import KINDS, build_parser, build_profiles, main
from intel_device_plugins.plugins.fpga.discovery import Mode as FpgaMode
from intel_device_plugins.plugins.fpga.dra import FpgaDriverProfile
from intel_device_plugins.plugins.gpu.dra import GpuDriverProfile
from intel_device_plugins.plugins.qat.dra import QatKernelDriverProfile
from tests.builders import two_socket_node


def test_each_driver_gets_its_own_flags_and_the_shared_ones(tmp_path: Path) -> None:
    two_socket_node(tmp_path, "[[npu]]\n[[dlb]]\ncount = 2\n")
    parser = build_parser()
    args = parser.parse_args(
        [
            "-node-name=n1",
            f"-prefix={tmp_path}",
            "-cdi-root=/run/cdi",
            "--driver", "qat -mode kernel",
            "--driver", "fpga -mode=region",
            "--driver", "gpu -bypath none",
            "--driver", "npu",
            "--driver", "dlb",
        ]
    )  # fmt: skip

    profiles = build_profiles(args, parser)

    qat, fpga, gpu, npu, dlb = profiles
    assert isinstance(qat, QatKernelDriverProfile)
    assert isinstance(fpga, FpgaDriverProfile) and fpga.mode is FpgaMode.REGION
    assert isinstance(gpu, GpuDriverProfile) and gpu.prefix == str(tmp_path)
    assert [len(p.scan().devices) for p in (npu, dlb)] == [1, 2]
    assert [p.driver_name for p in profiles] == [
        "qat.intel.com",
        "fpga.intel.com",
        "gpu.intel.com",
        "npu.intel.com",
        "dlb.intel.com",
    ]
    assert driver_config(args).cdi_root == Path("/run/cdi")


def test_every_kind_has_a_driver() -> None:
    parser = build_parser()
    args = parser.parse_args(["-node-name=n", *(word for kind in KINDS for word in ("--driver", kind))])

    names = {profile.driver_name for profile in build_profiles(args, parser)}

    assert names == {f"{kind}.intel.com" for kind in KINDS}


@pytest.mark.parametrize(
    ("drivers", "named"),
    [
        ([], "at least one --driver"),
        (["--driver", "tpu"], "--driver 'tpu': unknown kind"),
        (["--driver", ""], "unknown kind"),
        (["--driver", "sgx", "--driver", "dsa", "--driver", "sgx -v 2"], "more than once: sgx"),
        (["--driver", "dsa -prefix=/x"], "-prefix is common to all kinds"),
        (["--driver", "qat --node-name x"], "-node-name is common to all kinds"),
        (["--driver", "gpu -allow-ids=0x56c0 -deny-ids=0x56c1"], "--driver 'gpu -allow-ids"),
        (["--driver", "fpga -mode=fabric"], "-mode"),
    ],
)
def test_bad_drivers_exit_with_2_naming_them(
    drivers: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["-node-name=n", "-kubeconfig=/nonexistent", *drivers])

    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_every_drivers_socket_must_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # <deep>/dlb.intel.com/dra.sock is 107 bytes and fits; fpga's is 108 and does not.
    deep = tmp_path / ("d" * (84 - len(str(tmp_path)) - 1))
    assert len(str(deep)) == 84

    with pytest.raises(SystemExit):
        main(
            ["-node-name=n", f"-kubelet-plugins-directory-path={deep}", "--driver", "dlb", "--driver", "fpga"]
        )

    error = capsys.readouterr().err
    assert "fpga.intel.com/dra.sock" in error and "dlb.intel.com" not in error
