"""The DLB plugin as a real process against the kubelet stand-in, plus its command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.plugins.dlb.cli import build_parser, build_plugins
from intel_device_plugins.sim import dlb
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process

NODE = """
[node]
numa_nodes = 2

[[dlb]]
count = 2
numa_node = 0

[[dlb]]
count = 1
vfs = 4
numa_node = 1
"""


def test_common_flags_with_one_or_two_dashes() -> None:
    args = build_parser().parse_args(
        ["-prefix", "/tmp/n", "--device-plugin-dir=/tmp/dp", "-scan-interval", "2"]
    )
    [plugin] = build_plugins(args)
    assert plugin.root == Path("/tmp/n")
    assert args.device_plugin_dir == "/tmp/dp" and args.scan_interval == 2.0


@pytest.mark.parametrize("argv", [["-scan-interval", "soon"], ["-scan-interval", "0"]])
def test_a_malformed_scan_interval_is_rejected_naming_the_flag(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "-scan-interval" in capsys.readouterr().err


@pytest.mark.integration
async def test_pf_and_vf_resources_are_served_and_follow_hotplug(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root = tmp_path / "node"
    tree = build_node(parse_node_spec(NODE), root)
    argv = [
        console_script("intel_dlb_device_plugin"),
        "-prefix", str(root),
        "-device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(tmp_path / "cdi"),
        "-scan-interval", "0.2",
    ]  # fmt: skip
    pf, vf = "dlb.intel.com/pf", "dlb.intel.com/vf"
    async with plugin_process(argv, tmp_path / "dlb.log") as plugin:
        await kubelet.wait_for(
            lambda: len(kubelet.resources().get(pf, {})) == 2 and len(kubelet.resources().get(vf, {})) == 4
        )
        assert sorted(kubelet.resources()[vf]) == ["/dev/dlb3", "/dev/dlb4", "/dev/dlb5", "/dev/dlb6"]
        assert kubelet.resources()[vf]["/dev/dlb3"].numa_nodes == (1,)
        assert not kubelet.options(pf).get_preferred_allocation_available

        response = await kubelet.allocate(vf, ["/dev/dlb4"])
        assert [(d.host_path, d.container_path, d.permissions) for d in response.devices] == [
            (str(root / "dev/dlb4"), str(root / "dev/dlb4"), "rw")
        ]

        # A kubelet restart deletes every socket; both resources come back registered.
        before = len(kubelet.registrations)
        await kubelet.restart()
        await kubelet.wait_for(lambda: len(kubelet.registrations) >= before + 2)
        await kubelet.wait_for(lambda: kubelet.allocatable(vf) == 4 and kubelet.allocatable(pf) == 2)

        added = dlb.add_dlb(tree)
        await kubelet.wait_for(lambda: len(kubelet.resources()[pf]) == 3)
        tree.device_node("/dev/dlb9")  # a node without a sysfs device: logged, skipped
        dlb.remove_dlb(tree, added.name)
        await kubelet.wait_for(lambda: len(kubelet.resources()[pf]) == 2)
        assert await plugin.terminate() == 0
    assert "/dev/dlb9: no sysfs device" in plugin.log_text()
