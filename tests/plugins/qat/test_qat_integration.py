"""The QAT plugin as a real process against the kubelet stand-in, over real unix sockets."""

from __future__ import annotations

import os
from pathlib import Path

import grpc.aio
import pytest
from grpclib.exceptions import GRPCError

from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.qat import ADF_CTL
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from k8stest.kubeletapi import deviceplugin_v1beta1_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

NODE = """
[node]
numa_nodes = 2

[[qat]]
count = 2
vfs = 4
services = "sym;asym"
numa_node = 0

[[qat]]
count = 1
vfs = 2
services = "dc"
numa_node = 1
vf_driver = "4xxxvf"
"""


def command(root: Path, plugin_dir: Path, *extra: str) -> list[str]:
    return [
        console_script("intel_qat_device_plugin"),
        "-prefix", str(root),
        "--device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(root / "cdi"),
        "-scan-interval", "0.2",
        *extra,
    ]  # fmt: skip


def leftover_sockets(plugin_dir: Path) -> list[str]:
    return sorted(p.name for p in plugin_dir.iterdir() if p.name != "kubelet.sock")


async def test_dpdk_mode_serves_allocates_and_reports_health(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    tree = build_node(parse_node_spec(NODE), root)
    cy, dc = "qat.intel.com/cy", "qat.intel.com/dc"
    argv = command(root, plugin_dir, "-allocation-policy", "balanced")
    async with plugin_process(argv, tmp_path / "qat.log") as plugin:
        await kubelet.wait_for(
            lambda: len(kubelet.resources().get(cy, {})) == 8 and len(kubelet.resources().get(dc, {})) == 2
        )
        assert kubelet.options(cy).get_preferred_allocation_available
        # The dc VFs stay on the kernel driver (nothing rebinds them here): advertised, not allocatable.
        assert kubelet.allocatable(dc) == 0 and len(kubelet.resources()[dc]) == 2
        assert kubelet.allocatable(cy) == 8

        chosen = await kubelet.preferred(cy, sorted(kubelet.resources()[cy]), [], 2)
        assert [address.split(":")[1] for address in chosen] == ["10", "11"]

        # Two containers in one request: each gets its own QAT0.. numbering and only its devices.
        async with grpc.aio.insecure_channel(f"unix:{plugin_dir / 'qat.intel.com-cy.sock'}") as channel:
            response = await pb_grpc.DevicePluginStub(channel).Allocate(
                pb.AllocateRequest(
                    container_requests=[
                        pb.ContainerAllocateRequest(devices_ids=chosen),
                        pb.ContainerAllocateRequest(devices_ids=["0000:10:00.3"]),
                    ]
                ),
                timeout=10,
            )
        first, second = response.container_responses
        assert dict(first.envs) == {"QAT0": chosen[0], "QAT1": chosen[1]}
        assert dict(second.envs) == {"QAT0": "0000:10:00.3"}
        assert {d.container_path for d in first.devices} == {
            f"{root}/dev/vfio/{n}" for n in ("0", "4", "vfio")
        }
        assert kubelet.resources()[cy][chosen[0]].numa_nodes == (0,)

        with pytest.raises(GRPCError) as rejected:
            await kubelet.allocate(dc, ["0000:12:00.1"])
        assert "unhealthy device 0000:12:00.1" in (rejected.value.message or "")

        before = len(kubelet.registrations)
        await kubelet.restart()
        await kubelet.wait_for(
            lambda: len(kubelet.registrations) >= before + 2 and kubelet.allocatable(cy) == 8
        )

        tree.write("/sys/kernel/debug/qat_4xxx_0000:10:00.0/heartbeat/status", "-1\n")
        await kubelet.wait_for(lambda: kubelet.allocatable(cy) == 4)
        assert "0000:10:00.0: heartbeat reports the device failed" in plugin.log_text()
        assert "0000:12:00.1: Unhealthy: binding to vfio-pci had no effect" in plugin.log_text()
        assert await plugin.terminate() == 0
    assert leftover_sockets(plugin_dir) == []


async def test_kernel_mode_serves_sections_from_adf_ctl(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "node"
    build_node(parse_node_spec(profile_text("qat-kernel"), "qat-kernel profile"), root)
    adf_ctl_dir = root / ADF_CTL.lstrip("/").rsplit("/", 1)[0]
    monkeypatch.setenv("PATH", f"{adf_ctl_dir}:{os.environ['PATH']}")
    cy, dc = "qat.intel.com/cy1_dc0", "qat.intel.com/cy0_dc1"
    async with plugin_process(command(root, plugin_dir, "-mode", "kernel"), tmp_path / "qat.log") as plugin:
        await kubelet.wait_for(
            lambda: len(kubelet.resources().get(cy, {})) == 4 and len(kubelet.resources().get(dc, {})) == 4
        )
        assert sorted(kubelet.resources()[dc]) == ["DC_dev0_0", "DC_dev0_1", "DC_dev1_0", "DC_dev1_1"]
        response = await kubelet.allocate(cy, ["SSL_dev0_3", "SSL_dev0_1"])
        assert dict(response.envs) == {
            "QAT_SECTION_NAME_cy1_dc0_0": "SSL",
            "QAT_SECTION_NAME_cy1_dc0_1": "SSL",
            "QAT_SECTION_NAME": "SSL",
        }
        assert {d.container_path for d in response.devices} == {
            f"{root}/dev/{name}" for name in ("qat_adf_ctl", "qat_dev_processes", "usdm_drv", "uio0", "uio1")
        }
        assert await plugin.terminate() == 0


async def test_a_malformed_flag_stops_the_process_naming_it(tmp_path: Path, plugin_dir: Path) -> None:
    argv = command(tmp_path, plugin_dir, "-kernel-vf-drivers", "nosuchvf")
    async with plugin_process(argv, tmp_path / "qat.log") as plugin:
        assert await plugin.process.wait() == 2
        assert "-kernel-vf-drivers" in plugin.log_text() and "nosuchvf" in plugin.log_text()
