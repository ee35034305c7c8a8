"""The SGX plugin binary against the kubelet stand-in, over real unix sockets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process

pytestmark = pytest.mark.integration

WAIT = 20.0


async def test_sgx_limits_dcap_cdi_and_rescan(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    root, cdi = tmp_path / "node", tmp_path / "cdi"
    root.mkdir()
    cmd = [
        console_script("intel_sgx_device_plugin"),
        "-prefix",
        str(root),
        "-device-plugin-dir",
        str(plugin_dir),
        "-cdi-dir",
        str(cdi),
        "-scan-interval",
        "0.2",
        "-enclave-limit",
        "5",
        "-provision-limit",
        "2",
        "-dcap-infra-resources",
    ]
    async with plugin_process(cmd, tmp_path / "plugin.log") as plugin:
        # SGX appears after the plugin started (upstream scans once and would never see it).
        await kubelet.wait_for(lambda: "sgx.intel.com/enclave" in kubelet.resources(), WAIT)
        assert kubelet.allocatable("sgx.intel.com/enclave") == 0
        build_node(parse_node_spec("[[sgx]]\n"), root)
        await kubelet.wait_for(
            lambda: (
                kubelet.allocatable("sgx.intel.com/enclave") == 5
                and kubelet.allocatable("sgx.intel.com/provision") == 2
                and kubelet.allocatable("sgx.intel.com/registration") == 1
            ),
            WAIT,
        )
        enclave = await kubelet.allocate("sgx.intel.com/enclave", ["sgx-enclave-3"])
        registration = await kubelet.allocate("sgx.intel.com/registration", ["registration-1"])
        # A kubelet restart deletes every socket; all four resources come back.
        registrations = len(kubelet.registrations)
        await kubelet.restart()
        await kubelet.wait_for(
            lambda: (
                len(kubelet.registrations) >= registrations + 4
                and kubelet.allocatable("sgx.intel.com/enclave") == 5
            ),
            WAIT,
        )
        assert plugin.process.returncode is None
    assert [d.container_path for d in enclave.devices] == [f"{root}/dev/sgx_enclave"]
    assert [d.container_path for d in registration.devices] == [
        f"{root}/dev/sgx_enclave",
        f"{root}/dev/sgx_provision",
    ]
    assert [c.name for c in registration.cdi_devices] == ["intel.cdi.k8s.io/sgx=efivarfs"]
    spec_file = cdi / "intel.cdi.k8s.io-sgx-efivarfs.yaml"
    spec = yaml.safe_load(spec_file.read_text())
    assert spec["devices"][0]["containerEdits"]["mounts"][0]["type"] == "efivarfs"
    assert oct(os.stat(spec_file).st_mode & 0o777) == "0o644"
