"""The idle GPU DRA driver against the idle GPU device plugin, side by side on one simulated node.

A lighter companion of ``bench_dra_node.py`` (which needs the real node and the node image): it runs
the two processes from this checkout, at the same time, on the same simulated GPUs
(``k8stest.node.dra.DRA_NODE_PROFILE``, five cards), so both see the same load:

- ``intel_gpu_device_plugin`` with the GpuDevicePlugin sample's arguments (the operator's DaemonSet
  builder gives them), registered with the kubelet stand-in, which holds its ListAndWatch streams;
- ``intel_gpu_dra_driver`` with ``deploy/dra/gpu``'s arguments against a private kube-apiserver,
  configured as in a pod: no ``-kubeconfig``, ``KUBERNETES_SERVICE_HOST``/``_PORT`` set, and a token
  and the cluster CA in ``/var/run/secrets/kubernetes.io/serviceaccount`` (a tmpfs in a mount
  namespace of its own, so the machine's ``/run`` is left alone; hence root), with a stand-in for
  the kubelet's DRA side: it calls ``GetInfo`` and ``NotifyRegistrationStatus`` on the registration
  socket and holds the ``NodeWatchResources`` stream open, as a 1.37 kubelet does.

Once the plugin advertises every card and the driver's ResourceSlice holds every card, both settle,
then idle for ``--idle-seconds``: CPU of every thread over that window (schedstat), then VmRSS,
VmHWM and PSS, the thread count, and where the resident memory lies (``/proc/<pid>/smaps`` summed by
mapping: the heap and other anonymous memory, and each shared library's pages).

Prints Markdown. Run from the repository root (after ``make k8s-bins``)::

    .venv/bin/python bench/bench_dra_footprint.py --idle-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc.aio
from plugin_bench import LoadAverage, header, idle_cpu_percent, peak_rss_mib, pss_mib, rss_mib, wait_until

from intel_device_plugins.kube.rest import SERVICE_ACCOUNT_DIR
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script, plugin_process
from k8stest.binaries import find_binaries
from k8stest.controlplane import ControlPlaneConfig, running_control_plane
from k8stest.kubeclient import KubeClient
from k8stest.kubeletapi import dra_health_v1_pb2 as health_pb
from k8stest.kubeletapi import dra_health_v1_pb2_grpc as health_grpc
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb
from k8stest.kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from k8stest.node.dra import DRA_NODE_DEVICES, DRA_NODE_NAME, DRA_NODE_PROFILE
from k8stest.node.plugins import sample_daemonset

DRIVER = "gpu.intel.com"
PROCESSES = ("intel_gpu_dra_driver", "intel_gpu_device_plugin")
TOP_MAPPINGS = 8


def plugin_arguments() -> list[str]:
    """The GpuDevicePlugin sample's container arguments, as the operator builds its DaemonSet."""
    _, daemonset = sample_daemonset(DeviceKind.GPU, "unused")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    return [str(arg) for arg in container.get("args", [])]


def in_pod(account: Path, port: int) -> list[str]:
    """A command prefix that runs the rest as a pod's process sees the API server: the service
    account's files at their place (in a private mount namespace), the service's address in the
    environment. Each step execs the next, so the driver keeps the process ID the bench measures."""
    script = (
        "mount -t tmpfs -o size=1m,mode=755 tmpfs /run"
        f" && mkdir -p {SERVICE_ACCOUNT_DIR}"
        f' && cp "$0/token" "$0/ca.crt" {SERVICE_ACCOUNT_DIR}/ && exec "$@"'
    )
    return [
        "unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(account),
        "env", "KUBERNETES_SERVICE_HOST=127.0.0.1", f"KUBERNETES_SERVICE_PORT={port}",
    ]  # fmt: skip


def published_cards(client: KubeClient) -> set[str]:
    found = client.get(
        "/apis/resource.k8s.io/v1/resourceslices"
        f"?fieldSelector=spec.nodeName={DRA_NODE_NAME},spec.driver={DRIVER}"
    )
    return {device["name"] for item in found.get("items", []) for device in item["spec"].get("devices") or []}


async def kubelet_dra_side(registrar_dir: Path, done: asyncio.Event) -> None:
    """What the kubelet does with a DRA driver at idle: register it, then hold its health stream."""
    await wait_until(lambda: any(registrar_dir.glob("*-reg.sock")), timeout=60)
    (socket,) = registrar_dir.glob("*-reg.sock")
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        registration = reg_grpc.RegistrationStub(channel)
        info = await registration.GetInfo(reg_pb.InfoRequest(), timeout=10)
        await registration.NotifyRegistrationStatus(
            reg_pb.RegistrationStatus(plugin_registered=True), timeout=10
        )
    async with grpc.aio.insecure_channel(f"unix://{info.endpoint}") as channel:
        stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            health_pb.NodeWatchResourcesRequest()
        )
        await stream.read()  # the full state, sent on open
        await done.wait()
        stream.cancel()


def mappings(pid: int) -> tuple[dict[str, int], int]:
    """Resident kB per mapping (anonymous memory and the heap together), and the thread count."""
    sizes: collections.Counter[str] = collections.Counter()
    name = "anonymous"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        first, _, rest = line.partition(" ")
        if not first.endswith(":"):  # a mapping's header: address perms offset dev inode [path]
            fields = line.split()
            path = fields[5] if len(fields) > 5 else ""
            name = "anonymous" if not path or path in ("[heap]", "[stack]") else os.path.basename(path)
        elif first == "Rss:":
            sizes[name] += int(rest.split()[0])
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return dict(sizes), threads


async def run(workdir: Path, idle_seconds: float, load: LoadAverage) -> str:
    bins, reason = find_binaries()
    if bins is None:
        raise SystemExit(reason)
    root = workdir / "node"
    build_node(parse_node_spec(DRA_NODE_PROFILE), root)
    cards = set(DRA_NODE_DEVICES)
    kubelet_dir = Path(tempfile.mkdtemp(prefix="dra-fp-", dir="/tmp"))  # sockets: short paths
    plugin_dir = kubelet_dir / "device-plugins"
    with running_control_plane(bins, workdir / "cp", ControlPlaneConfig(with_kwok=False)) as cp:
        client = cp.client()
        client.create(
            "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": DRA_NODE_NAME}}
        )
        account = workdir / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(cp.admin.token)
        (account / "ca.crt").write_bytes(cp.admin.ca_pem)
        done = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            kubelet = await stack.enter_async_context(KubeletStandIn(plugin_dir))
            plugin = await stack.enter_async_context(
                plugin_process(
                    [
                        console_script("intel_gpu_device_plugin"),
                        "-prefix", str(root),
                        "-device-plugin-dir", str(plugin_dir),
                        "-cdi-dir", str(kubelet_dir / "cdi-plugin"),
                        *plugin_arguments(),
                    ],
                    workdir / "plugin.log",
                )
            )  # fmt: skip
            driver = await stack.enter_async_context(
                plugin_process(
                    [
                        *in_pod(account, cp.ports.apiserver),
                        console_script("intel_gpu_dra_driver"),
                        "-v", "0",
                        "-node-name", DRA_NODE_NAME,
                        "-prefix", str(root),
                        "-cdi-root", str(kubelet_dir / "cdi"),
                        "-kubelet-registrar-directory-path", str(kubelet_dir / "plugins_registry"),
                        "-kubelet-plugins-directory-path", str(kubelet_dir / "plugins"),
                    ],
                    workdir / "driver.log",
                )
            )  # fmt: skip
            side = asyncio.create_task(kubelet_dra_side(kubelet_dir / "plugins_registry", done))
            try:
                await wait_until(lambda: published_cards(client) == cards, timeout=60)
                await wait_until(lambda: kubelet.allocatable("gpu.intel.com/i915") > 0, timeout=60)
                await asyncio.sleep(3.0)
                if side.done():
                    side.result()
                pids = {PROCESSES[0]: driver.process.pid, PROCESSES[1]: plugin.process.pid}
                load.sample()
                idle = await idle_cpu_percent(pids, idle_seconds)
                load.sample()
                figures = {
                    name: (rss_mib(pid), peak_rss_mib(pid), pss_mib(pid), *mappings(pid))
                    for name, pid in pids.items()
                }
            except Exception:
                for process in (driver, plugin):
                    print(process.log_text()[-3000:], file=sys.stderr)
                raise
            finally:
                done.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(side, 5)
            code = await driver.terminate(15)
            left = published_cards(client)
        client.close()
    if code != 0 or left:
        raise SystemExit(
            f"the driver exited with {code} or left {sorted(left)}:\n{driver.log_text()[-3000:]}"
        )
    return report(idle, figures)


def report(
    idle: Mapping[str, float], figures: Mapping[str, tuple[float, float, float, dict[str, int], int]]
) -> str:
    lines = ["| idle | CPU (one core) | VmRSS | VmHWM | PSS | threads |", "|---|---|---|---|---|---|"]
    for name in PROCESSES:
        rss, hwm, pss, _, threads = figures[name]
        lines.append(
            f"| `{name}` | {idle[name]:.3f} % | {rss:.1f} MiB | {hwm:.1f} MiB | {pss:.1f} MiB | {threads} |"
        )
    lines += ["", "Resident memory by mapping (MiB; anonymous includes the heap and thread stacks):", ""]
    names = collections.Counter[str]()
    for name in PROCESSES:
        names.update(figures[name][3])
    top = [name for name, _ in names.most_common(TOP_MAPPINGS)]
    lines.append("| mapping | " + " | ".join(f"`{name}`" for name in PROCESSES) + " |")
    lines.append("|---|" + "---|" * len(PROCESSES))
    for mapping in top:
        values = " | ".join(f"{figures[name][3].get(mapping, 0) / 1024:.1f}" for name in PROCESSES)
        lines.append(f"| {mapping} | {values} |")
    rest = " | ".join(
        f"{sum(kb for m, kb in figures[name][3].items() if m not in top) / 1024:.1f}" for name in PROCESSES
    )
    lines.append(f"| everything else | {rest} |")
    driver_rss, plugin_rss = figures[PROCESSES[0]][0], figures[PROCESSES[1]][0]
    lines += [
        "",
        f"Driver RSS minus plugin RSS: {driver_rss - plugin_rss:+.1f} MiB; idle CPU"
        f" {idle[PROCESSES[0]]:.3f} % against {idle[PROCESSES[1]]:.3f} % of a core.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="idle window (default 60)")
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", os.path.relpath(sys.argv[0]), *sys.argv[1:]])
    load = LoadAverage()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-dra-footprint-") as tmp:
        table = asyncio.run(run(Path(tmp), args.idle_seconds, load))
    load.sample()
    print(header(command, load, time.monotonic() - began))
    print()
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
