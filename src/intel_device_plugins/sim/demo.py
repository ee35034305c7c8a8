"""The simulated-node demo: a plugin process, a kubelet stand-in, an allocation and a hot-plug.

Runs with no hardware and no privileges: everything lives in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2 as pb
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import NodeSpec, build_node, load_node_spec, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text


def _say(text: str = "") -> None:
    print(text, flush=True)


def _table(kubelet: KubeletStandIn) -> str:
    rows = [("RESOURCE", "DEVICE", "HEALTH", "NUMA")]
    for resource, devices in sorted(kubelet.resources().items()):
        for device in sorted(devices.values(), key=lambda d: d.id):
            numa = ",".join(map(str, device.numa_nodes)) or "-"
            rows.append((resource, device.id, device.health, numa))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows
    )


def _describe(response: pb.ContainerAllocateResponse, root: Path) -> str:
    """The container's view, with the simulated root shown as ``$NODE`` for readability."""
    lines = ["  device nodes:"]
    lines += [f"    {d.host_path} -> {d.container_path} ({d.permissions})" for d in response.devices] or [
        "    (none)"
    ]
    lines.append("  mounts:")
    lines += [
        f"    {m.host_path} -> {m.container_path}{' (ro)' if m.read_only else ''}" for m in response.mounts
    ] or ["    (none)"]
    lines.append("  env:")
    lines += [f"    {k}={v}" for k, v in sorted(response.envs.items())] or ["    (none)"]
    lines.append("  CDI devices:")
    lines += [f"    {c.name}" for c in response.cdi_devices] or ["    (none)"]
    return "\n".join(lines).replace(str(root), "$NODE")


def _expected_gpu_resources(spec: NodeSpec) -> list[str]:
    """The resources the GPU plugin should advertise for this node: one per driver, plus monitoring."""
    drivers = sorted({str(entry.get("driver", "i915")) for entry in spec.devices.get("gpu", ())})
    return [f"gpu.intel.com/{driver}" for driver in drivers] + (
        ["gpu.intel.com/monitoring"] if drivers else []
    )


def _all_advertised(kubelet: KubeletStandIn, resources: Sequence[str]) -> bool:
    advertised = kubelet.resources()
    return all(advertised.get(resource) for resource in resources)


def _counts(kubelet: KubeletStandIn, resource: str) -> tuple[int, int]:
    devices = kubelet.resources().get(resource, {})
    return len(devices), kubelet.allocatable(resource)


async def run_demo(workdir: Path, node_file: Path | None) -> int:
    spec = (
        load_node_spec(node_file)
        if node_file
        else parse_node_spec(profile_text("default"), "default profile")
    )
    root = workdir / "node"
    plugin_dir = workdir / "dp"
    tree = build_node(spec, root)
    _say(f"Simulated node {spec.name!r} built under {root}")
    _say("Kubelet: the built-in stand-in (device plugin API v1beta1 over unix sockets)")
    expected = _expected_gpu_resources(spec)
    if not expected:
        _say("The node has no GPUs; nothing to demonstrate.")
        return 1
    resource = expected[0]
    driver = resource.split("/")[1]
    command = [
        console_script("intel_gpu_device_plugin"),
        "-prefix", str(root),
        "-device-plugin-dir", str(plugin_dir),
        "-cdi-dir", str(workdir / "cdi"),
        "-shared-dev-num", "2",
        "-allocation-policy", "balanced",
        "-enable-monitoring",
    ]  # fmt: skip
    async with KubeletStandIn(plugin_dir) as kubelet:
        started = time.monotonic()
        async with plugin_process(command, workdir / "gpu-plugin.log") as plugin:
            try:
                await kubelet.wait_for(lambda: _all_advertised(kubelet, expected), timeout=15)
            except TimeoutError:
                _say("The GPU plugin did not register in time; its log:\n" + plugin.log_text())
                return 1
            elapsed = time.monotonic() - started
            _say(f"GPU plugin registered {len(kubelet.resources())} resources in {elapsed:.2f} s\n")
            _say(_table(kubelet))

            available = sorted(kubelet.resources()[resource])
            chosen = await kubelet.preferred(resource, available, [], 2)
            _say(f"\nA container asks for 2 x {resource}; balanced policy prefers {chosen}")
            response = await kubelet.allocate(resource, chosen)
            _say(f"The container gets ($NODE = {root}):\n" + _describe(response, root))

            before = _counts(kubelet, resource)
            plugged_at = time.monotonic()
            card = gpu.add_card(tree, driver=driver, numa_node=0)
            await kubelet.wait_for(lambda: _counts(kubelet, resource)[0] > before[0], timeout=10)
            _say(
                f"\nHot-plugged card{card.index} ({driver}, {card.address}): {resource} went from "
                f"{before[0]} to {_counts(kubelet, resource)[0]} devices "
                f"in {time.monotonic() - plugged_at:.2f} s"
            )
            unplugged_at = time.monotonic()
            gpu.remove_card(tree, card.index)
            await kubelet.wait_for(lambda: _counts(kubelet, resource) == before, timeout=10)
            _say(
                f"Hot-unplugged card{card.index}: back to {before[0]} devices in "
                f"{time.monotonic() - unplugged_at:.2f} s"
            )
            code = await plugin.terminate()
        leftovers = sorted(p.name for p in plugin_dir.glob("*.sock") if p.name != "kubelet.sock")
        _say(f"\nPlugin stopped with exit code {code}; sockets left behind: {leftovers or 'none'}")
        return 0 if code == 0 and not leftovers else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="intel-device-plugins-demo", description=__doc__)
    parser.add_argument("--node", type=Path, help="node description (TOML); default: the bundled demo node")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="idp-demo-") as workdir:
        return asyncio.run(run_demo(Path(workdir), args.node))


if __name__ == "__main__":
    sys.exit(main())
