"""Several kinds from one process: flag handling and a real process against the kubelet stand-in."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from intel_device_plugins.plugins.combined import KINDS, build_kind, build_parser, main
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text


def test_kind_flags_reach_the_kind() -> None:
    parser = build_parser()
    (plugin,) = build_kind("gpu -shared-dev-num 3 --allocation-policy=packed", ["-prefix", "/node"], parser)
    assert isinstance(plugin, GpuPlugin)
    assert plugin.options.shared_dev_num == 3 and plugin.prefix == "/node"


def test_every_kind_builds_with_default_flags() -> None:
    parser = build_parser()
    for kind in KINDS:
        assert build_kind(kind, ["-prefix", "/node"], parser), kind


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "at least one --plugin"),
        (["--plugin", "fpgaa"], "unknown kind"),
        (["--plugin", "gpu -prefix /x"], "-prefix is common to all kinds"),
        (["--plugin", "gpu", "--plugin", "gpu -shared-dev-num 2"], "more than once: gpu"),
        (["--plugin", "gpu -allow-ids 0x56c0 -deny-ids 0x56c1"], "cannot be used together"),
        (["--plugin", "gpu -shared-dev-num zero"], "shared-dev-num"),
    ],
)
def test_bad_combined_flags_exit_2_naming_the_problem(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.integration
async def test_one_process_serves_gpu_qat_dsa_and_sgx(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    build_node(parse_node_spec(profile_text("mixed")), root)
    command = [
        console_script("intel_device_plugins"),
        "-prefix", str(root),
        "-device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(tmp_path / "cdi"),
        "--plugin", "gpu -shared-dev-num 2",
        "--plugin", "qat",
        "--plugin", "dsa",
        "--plugin", "sgx -enclave-limit 4 -provision-limit 2",
    ]  # fmt: skip
    expected = {
        "gpu.intel.com/i915": 4,
        "gpu.intel.com/xe": 4,
        "qat.intel.com/cy": 8,
        "qat.intel.com/dc": 8,
        "sgx.intel.com/enclave": 4,
        "sgx.intel.com/provision": 2,
    }

    def all_there() -> bool:
        resources = kubelet.resources()
        return all(len(resources.get(name, {})) == count for name, count in expected.items())

    async with plugin_process(command, tmp_path / "combined.log") as process:
        try:
            await kubelet.wait_for(all_there, timeout=15)
        except TimeoutError:
            pytest.fail(f"not all resources advertised: {kubelet.resources().keys()}\n{process.log_text()}")
        dsa = [name for name in kubelet.resources() if name.startswith("dsa.intel.com/wq-user-")]
        assert dsa, kubelet.resources().keys()
        response = await kubelet.allocate(
            "qat.intel.com/cy", [sorted(kubelet.resources()["qat.intel.com/cy"])[0]]
        )
        assert list(response.envs) == ["QAT0"]
        started = time.monotonic()
        assert await asyncio.wait_for(process.terminate(), 5) == 0
        assert time.monotonic() - started < 1.0  # every kind stopped within a second of SIGTERM
    assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]
