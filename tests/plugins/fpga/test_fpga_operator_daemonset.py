"""The operator's FPGA DaemonSet against this plugin: what it passes and mounts is what the plugin uses."""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.deviceplugin.cli import DEFAULT_CDI_DIR, DEFAULT_DEVICE_PLUGIN_DIR
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.plugins.fpga import hookinstall
from intel_device_plugins.plugins.fpga.cli import build_parser
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH, LAYOUTS, Mode


def fpga_daemonset(spec: dict[str, Any]) -> dict[str, Any]:
    parsed = parse_spec(DeviceKind.FPGA, {"image": "intel/intel-fpga-plugin:0.36.0", **spec})
    return desired_daemonset(parsed, Owner(DeviceKind.FPGA, "fpga", "uid-1"), "inteldeviceplugins-system")


def mounted(container: dict[str, Any], volumes: dict[str, Any]) -> dict[str, str]:
    """Container mount path → host path, for host-path volumes."""
    return {
        m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
        for m in container.get("volumeMounts", ())
        if "hostPath" in volumes[m["name"]]
    }


@pytest.mark.parametrize("mode", list(Mode))
def test_plugin_accepts_the_daemonset_command_line(mode: Mode, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = fpga_daemonset({"mode": mode.value, "logLevel": 4})["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["intel_fpga_device_plugin"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    monkeypatch.setenv("NODE_NAME", "worker-1")
    args = build_parser().parse_args(container["args"])
    assert args.mode is mode and args.verbosity == 4 and args.node_name == "worker-1"


def test_daemonset_mounts_what_the_plugin_reads_and_writes() -> None:
    pod = fpga_daemonset({"mode": "region"})["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = pod["containers"]
    mounts = mounted(container, volumes)
    assert mounts["/dev"] == "/dev"  # port and FME nodes, /dev/char links
    for layout in LAYOUTS.values():  # both drivers' class directories
        assert any(layout.class_dir.startswith(f"{path}/") for path in mounts), layout.class_dir
    assert mounts[DEFAULT_DEVICE_PLUGIN_DIR] == DEFAULT_DEVICE_PLUGIN_DIR
    assert mounts[DEFAULT_CDI_DIR] == DEFAULT_CDI_DIR  # region mode writes its CDI specs here
    (init,) = pod["initContainers"]
    assert init["name"] == "intel-fpga-initcontainer"
    init_mounts = mounted(init, volumes)
    hook_dir = CRI_HOOK_PATH.rsplit("/", 1)[0]
    assert init_mounts[hook_dir] == hook_dir  # the hook named in the CDI specs lands on the host
    # The node image's installer puts the launcher exactly where the CDI specs name the hook.
    assert init["command"] == ["intel_fpga_hook_install"]
    assert f"{hookinstall.DEFAULT_TARGET}/{hookinstall.LAUNCHER_NAME}" == CRI_HOOK_PATH
    assert "privileged" not in init["securityContext"] and list(init_mounts) == [hook_dir]
