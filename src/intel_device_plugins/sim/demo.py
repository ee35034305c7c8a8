"""The simulated-node demo: plugin processes, a kubelet stand-in, allocations, a GPU health fault from a
simulated xpumd and its recovery, and a hot-plug.

Runs with no hardware and no privileges: everything lives in a temporary directory. The kubelet's real
device manager and the real node are the test tier's (``k8stest/demo.py``, what ``make demo`` runs); it hands
them in as ``DemoBackends``, so the shipped package never imports the test tier.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.demo_fpga import fpga_region_scene
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelets import ContainerView, DemoKubelet, StandInKubelet
from intel_device_plugins.sim.node import NodeSpec, NodeSpecError, build_node, load_node_spec, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from intel_device_plugins.sim.profiles import profile_text
from intel_device_plugins.sim.xpumdcli import XpumdProcess, xpumd_process

XPUMD_INTERVAL_S = 1.0
"""The simulated xpumd's snapshot period (5 s in xpumd); a change is pushed at once either way."""
SETTLE_S = 0.3  # how long the set of registered resources must stay the same before the table is printed


def _say(text: str = "") -> None:
    print(text, flush=True)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns; the first row is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _table(kubelet: DemoKubelet) -> str:
    """One row per resource: how many devices, how many healthy, on which NUMA nodes, some IDs."""
    rows = [("RESOURCE", "DEVICES", "HEALTHY", "NUMA", "IDS")]
    for resource, devices in sorted(kubelet.resources().items()):
        ids = sorted(devices)
        healthy = sum(1 for device in devices.values() if device.health == "Healthy")
        numa = (
            ",".join(map(str, sorted({n for device in devices.values() for n in device.numa_nodes}))) or "-"
        )
        shown = ", ".join(ids[:3]) + (f", … (+{len(ids) - 3})" if len(ids) > 3 else "")
        rows.append((resource, str(len(ids)), str(healthy), numa, shown))
    return format_table(rows)


def _describe(view: ContainerView, root: Path) -> str:
    """The container's view, with the simulated root shown as ``$NODE`` for readability."""
    sections = {
        "device nodes": [
            f"{host} -> {container} ({permissions})" for host, container, permissions in view.devices
        ],
        "mounts": [f"{host} -> {container}{' (ro)' if ro else ''}" for host, container, ro in view.mounts],
        "env": [f"{k}={v}" for k, v in sorted(view.envs.items())],
        "CDI devices": list(view.cdi_devices),
    }
    lines = []
    for title, items in sections.items():
        lines.append(f"  {title}:")
        lines += [f"    {item}" for item in items] or ["    (none)"]
    return "\n".join(lines).replace(str(root), "$NODE")


def expected_gpu_resources(spec: NodeSpec) -> list[str]:
    """The resources the GPU plugin should advertise for this node: one per driver, plus monitoring."""
    drivers = sorted({str(entry.get("driver", "i915")) for entry in spec.devices.get("gpu", ())})
    return [f"gpu.intel.com/{driver}" for driver in drivers] + (
        ["gpu.intel.com/monitoring"] if drivers else []
    )


# Simulator kind → (combined-process kind, resource namespace). GPUs run as their own process.
OTHER_KINDS = {
    "qat": ("qat", "qat.intel.com"),
    "dsa": ("dsa", "dsa.intel.com"),
    "iaa": ("iaa", "iaa.intel.com"),
    "dlb": ("dlb", "dlb.intel.com"),
    "npu": ("npu", "npu.intel.com"),
    "sgx": ("sgx", "sgx.intel.com"),
    "fpga": ("fpga", "fpga.intel.com"),
}


def first_lists_complete(
    registered: Collection[str], listed: Collection[str], resources: Sequence[str], namespaces: Sequence[str]
) -> bool:
    """True once every registered resource has answered its first ListAndWatch, every expected resource is
    among them, and every expected resource namespace has at least one.

    Registration alone is not enough: a resource registers before its plugin has sent the device list, and
    a table printed then shows it with no devices.
    """
    answered = set(listed)
    if not set(registered) <= answered:
        return False
    return set(resources) <= answered and set(namespaces) <= {name.split("/")[0] for name in answered}


async def _wait_for_first_lists(
    kubelet: DemoKubelet, resources: Sequence[str], namespaces: Sequence[str], timeout: float
) -> None:
    """Wait for ``first_lists_complete`` to hold and the set of registered resources to stay the same briefly.

    A plugin process registers its resources one after the other, so a late one may still be on its way when
    the others have answered.
    """
    deadline = time.monotonic() + timeout
    while True:
        await kubelet.wait_for(
            lambda: first_lists_complete(kubelet.resources(), kubelet.listed(), resources, namespaces),
            timeout=max(0.1, deadline - time.monotonic()),
        )
        seen = set(kubelet.resources())
        await asyncio.sleep(SETTLE_S)
        if set(kubelet.resources()) == seen and first_lists_complete(
            seen, kubelet.listed(), resources, namespaces
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError


def _counts(kubelet: DemoKubelet, resource: str) -> tuple[int, int]:
    devices = kubelet.resources().get(resource, {})
    return len(devices), kubelet.allocatable(resource)


def _one_line(view: ContainerView, root: Path) -> str:
    parts = []
    if view.devices:
        parts.append("devices " + ", ".join(container for _, container, _ in view.devices))
    if view.mounts:
        parts.append("mounts " + ", ".join(container for _, container, _ in view.mounts))
    if view.envs:
        parts.append("env " + ", ".join(f"{k}={v}" for k, v in sorted(view.envs.items())))
    if view.cdi_devices:
        parts.append("CDI " + ", ".join(view.cdi_devices))
    return "; ".join(parts).replace(str(root), "$NODE") or "(nothing)"


@dataclass(frozen=True)
class DemoNode:
    spec: NodeSpec
    tree: FakeTree
    workdir: Path

    @property
    def root(self) -> Path:
        return self.tree.root

    @property
    def plugin_dir(self) -> Path:
        return self.workdir / "dp"

    def common_flags(self) -> list[str]:
        return [
            "-prefix", str(self.root),
            "-device-plugin-dir", str(self.plugin_dir),
            "-cdi-dir", str(self.workdir / "cdi"),
        ]  # fmt: skip


async def _gpu_scene(node: DemoNode, kubelet: DemoKubelet, expected: Sequence[str]) -> None:
    resource = expected[0]
    view = await kubelet.run_container(resource, 2)
    chosen = f": the balanced policy chose {list(view.chosen_ids)}" if view.chosen_ids else ""
    _say(f"\nA container asks for 2 x {resource}{chosen}")
    _say(f"The container gets ($NODE = {node.root}):\n" + _describe(view, node.root))


async def _other_kinds_scene(node: DemoNode, kubelet: DemoKubelet, namespaces: Sequence[str]) -> None:
    _say("\nOne container per other resource, one device each:")
    for resource, devices in sorted(kubelet.resources().items()):
        if resource.split("/")[0] not in namespaces:
            continue
        healthy = sorted(d.id for d in devices.values() if d.health == "Healthy")
        if not healthy:
            _say(f"  {resource}: no healthy device to allocate")
            continue
        view = await kubelet.run_container(resource, 1)
        _say(f"  {resource}: {_one_line(view, node.root)}")


async def _hotplug_scene(node: DemoNode, kubelet: DemoKubelet, resource: str) -> None:
    driver = resource.split("/")[1]
    before = _counts(kubelet, resource)
    plugged_at = time.monotonic()
    card = gpu.add_card(node.tree, driver=driver, numa_node=0)
    await kubelet.wait_for(lambda: _counts(kubelet, resource)[0] > before[0], timeout=10)
    _say(
        f"\nHot-plugged card{card.index} ({driver}, {card.address}): {resource} went from "
        f"{before[0]} to {_counts(kubelet, resource)[0]} devices in {time.monotonic() - plugged_at:.2f} s"
    )
    unplugged_at = time.monotonic()
    gpu.remove_card(node.tree, card.index)
    await kubelet.wait_for(lambda: _counts(kubelet, resource) == before, timeout=10)
    elapsed = time.monotonic() - unplugged_at
    _say(f"Hot-unplugged card{card.index}: back to {before[0]} devices in {elapsed:.2f} s")


async def _health_scene(node: DemoNode, kubelet: DemoKubelet, resource: str, xpumd: XpumdProcess) -> None:
    """xpumd reports uncorrectable memory errors on one card: its IDs turn Unhealthy; xpumd re-attaches
    the card after a reset: Healthy again."""
    devices = kubelet.resources().get(resource, {})
    card = sorted(devices)[0].rsplit("-", 1)[0]
    ids = sorted(device for device in devices if device.rsplit("-", 1)[0] == card)
    address = node.tree.path(f"/sys/class/drm/{card}/device").resolve().name

    def states() -> set[str]:
        now = kubelet.resources().get(resource, {})
        return {now[device].health for device in ids if device in now}

    faulted_at = time.monotonic()
    await xpumd.send(f"memory_errors {address}")
    await kubelet.wait_for(lambda: states() == {"Unhealthy"}, timeout=10)
    _say(
        f"\nxpumd reports uncorrectable memory errors on {card} ({address}): {', '.join(ids)} Unhealthy "
        f"in {time.monotonic() - faulted_at:.2f} s"
    )
    recovered_at = time.monotonic()
    await xpumd.send(f"attach {address}")
    await kubelet.wait_for(lambda: states() == {"Healthy"}, timeout=10)
    _say(f"xpumd re-attaches {card} after a reset: Healthy again in {time.monotonic() - recovered_at:.2f} s")


KUBELET_NAMES = {
    "device-manager": "the kubelet's real device manager",
    "stand-in": "the demo's kubelet stand-in",
}


NEEDS_SOURCE_TREE = (
    "needs this repository's source tree (package k8stest): run it from a checkout with make demo"
)


def _not_shipped() -> tuple[bool, str]:
    return False, f"the device-manager harness {NEEDS_SOURCE_TREE}"


@dataclass(frozen=True)
class DemoBackends:
    """What runs the demo beyond the stand-in; the installed package has none of it."""

    #: Starts the kubelet's real device manager for (plugin directory, work directory).
    start_device_manager: Callable[[Path, Path], Awaitable[DemoKubelet]] | None = None
    #: Whether the real device manager can run here, and if not, why.
    device_manager_available: Callable[[], tuple[bool, str]] = _not_shipped
    #: The scenario on a real kubelet node: (node, how to print) → exit code.
    run_real: Callable[[NodeSpec, Callable[[str], None]], int] | None = None


SHIPPED: Final = DemoBackends()


def resolve_kubelet(choice: str, backends: DemoBackends = SHIPPED) -> tuple[str, str]:
    """(the kubelet to use, why the real device manager is not used or "") for a ``--kubelet`` choice."""
    if choice != "auto":
        return choice, ""
    available, reason = backends.device_manager_available()
    return ("device-manager", "") if available else ("stand-in", reason)


def runtime_banner(runtime: str, kubelet: str = "") -> str:
    """The demo's first line: which node runtime (and for the simulated one, which kubelet) it uses."""
    if runtime == "real":
        return (
            "Node runtime: real (kubelet, containerd and runc in namespaces over the simulated /sys and /dev,"
            " joined to a local control plane)"
        )
    return f"Node runtime: sim (plugin processes on a simulated node; kubelet: {KUBELET_NAMES[kubelet]})"


async def _start_kubelet(choice: str, node: DemoNode, backends: DemoBackends) -> DemoKubelet:
    if choice == "device-manager":
        if backends.start_device_manager is None:
            raise RuntimeError(f"--kubelet device-manager {NEEDS_SOURCE_TREE}")
        return await backends.start_device_manager(node.plugin_dir, node.workdir)
    return await StandInKubelet.start(node.plugin_dir)


async def run_demo(
    workdir: Path, spec: NodeSpec, kubelet_choice: str, backends: DemoBackends = SHIPPED
) -> int:
    """The simulated-node scenario; ``kubelet_choice`` is resolved already (see resolve_kubelet)."""
    node = DemoNode(spec, build_node(spec, workdir / "node"), workdir)
    _say(f"Simulated node {spec.name!r} built under {node.root}")
    gpu_resources = expected_gpu_resources(spec)
    others = [OTHER_KINDS[kind] for kind in spec.devices if kind in OTHER_KINDS]
    if not gpu_resources and not others:
        _say("The node has no devices the demo knows; nothing to demonstrate.")
        return 1
    commands: dict[str, list[str]] = {}
    xpumd_socket = workdir / "xpumd.sock"
    if gpu_resources:
        commands["GPU plugin"] = [
            console_script("intel_gpu_device_plugin"), *node.common_flags(),
            "-shared-dev-num", "2", "-allocation-policy", "balanced", "-enable-monitoring",
            "-xpumd-endpoint", str(xpumd_socket),
        ]  # fmt: skip
    if others:
        commands["combined plugin (" + ", ".join(kind for kind, _ in others) + ")"] = [
            console_script("intel_device_plugins"), *node.common_flags(),
            *(word for kind, _ in others for word in ("--plugin", kind)),
        ]  # fmt: skip
    namespaces = [namespace for _, namespace in others]
    kubelet = await _start_kubelet(kubelet_choice, node, backends)
    _say(f"Kubelet: {kubelet.description}")
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(kubelet.stop)
        started = time.monotonic()
        xpumd = None
        if gpu_resources:
            xpumd = await stack.enter_async_context(
                xpumd_process(
                    console_script("intel-sim-xpumd"), xpumd_socket, node.root, XPUMD_INTERVAL_S,
                    workdir / "xpumd.log",
                )
            )  # fmt: skip
        processes = {
            name: await stack.enter_async_context(plugin_process(argv, workdir / f"plugin-{index}.log"))
            for index, (name, argv) in enumerate(commands.items())
        }
        _say("Started: " + ", ".join(processes))
        try:
            await _wait_for_first_lists(kubelet, gpu_resources, namespaces, timeout=20)
        except TimeoutError:
            for name, process in processes.items():
                _say(f"--- {name} log:\n{process.log_text()}")
            _say("Not every plugin registered in time.")
            return 1
        _say(f"{len(kubelet.resources())} resources registered in {time.monotonic() - started:.2f} s\n")
        _say(_table(kubelet))
        if gpu_resources:
            await _gpu_scene(node, kubelet, gpu_resources)
        if others:
            await _other_kinds_scene(node, kubelet, namespaces)
        if xpumd is not None:
            await _health_scene(node, kubelet, gpu_resources[0], xpumd)
            _say("(simulated xpumd: intel-sim-xpumd; the GPU plugin runs with -xpumd-endpoint)")
        if gpu_resources:
            await _hotplug_scene(node, kubelet, gpu_resources[0])
        if "fpga" in spec.devices:
            region_code = await fpga_region_scene(kubelet, node.root, workdir, node.common_flags(), _say)
        codes = {name: await process.terminate() for name, process in processes.items()}
        if "fpga" in spec.devices:
            codes["FPGA region-mode plugin"] = region_code
    leftovers = sorted(p.name for p in node.plugin_dir.glob("*.sock") if p.name != "kubelet.sock")
    _say("\n" + "; ".join(f"{name} exited with {code}" for name, code in codes.items()))
    _say(f"Sockets left behind: {leftovers or 'none'}")
    return 0 if not any(codes.values()) and not leftovers else 1


def run_real(spec: NodeSpec, backends: DemoBackends) -> int:
    """The same scenario on a real kubelet node, when the test tier handed it in."""
    if backends.run_real is None:
        _say(f"--node-runtime real {NEEDS_SOURCE_TREE}")
        return 2
    return backends.run_real(spec, _say)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="intel-device-plugins-demo", description=__doc__)
    parser.add_argument("--node", type=Path, help="node description (TOML); default: the bundled demo node")
    parser.add_argument(
        "--node-runtime",
        choices=("sim", "real"),
        default="sim",
        help="sim (default): plugin processes against a kubelet on a simulated node, no privileges;"
        " real: the plugins' DaemonSets from the node image on a real kubelet node (root, test/k8s/build.sh,"
        " test/node/build.sh, make images)",
    )
    parser.add_argument(
        "--kubelet",
        choices=("auto", "stand-in", "device-manager"),
        help="with --node-runtime sim: the kubelet to run against; auto (default): the real device manager"
        " when it is built and usable",
    )
    args = parser.parse_args(argv)
    if args.node_runtime == "real" and args.kubelet is not None:
        parser.error("--kubelet applies to --node-runtime sim only (the real node runs the whole kubelet)")
    args.kubelet = args.kubelet or "auto"
    return args


def main(argv: Sequence[str] | None = None, backends: DemoBackends = SHIPPED) -> int:
    args = parse_args(argv)
    try:
        spec = (
            load_node_spec(args.node)
            if args.node
            else parse_node_spec(profile_text("default"), "default profile")
        )
    except (OSError, NodeSpecError) as e:
        print(f"intel-device-plugins-demo: {e}", file=sys.stderr)
        return 2
    if args.node_runtime == "real":
        _say(runtime_banner("real"))
        return run_real(spec, backends)
    kubelet, reason = resolve_kubelet(args.kubelet, backends)
    _say(runtime_banner("sim", kubelet))
    if reason:
        _say(f"(the kubelet's real device manager is not used: {reason})")
    with tempfile.TemporaryDirectory(prefix="idp-demo-") as workdir:
        return asyncio.run(run_demo(Path(workdir), spec, kubelet, backends))


if __name__ == "__main__":
    sys.exit(main())
