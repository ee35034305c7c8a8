"""The demo's scenario on a real kubelet node: ``intel-device-plugins-demo --node-runtime real``.

The same simulated node as the quick demo, but the plugins run as the operator's DaemonSets from
this project's node image, under kubelet + containerd + runc in namespaces (docs/node.md), joined
to a real control plane. The table comes from the Node's capacity and allocatable, a pod scheduled
by the real scheduler shows what it got, and a hot-plugged GPU shows allocatable follow.

Why here and not in ``intel_device_plugins.sim``: everything below needs the test tier's
infrastructure (k8stest), which the wheel does not ship; the demo imports this module only when
asked for the real runtime.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.demo import OTHER_KINDS, expected_gpu_resources, format_table
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import NodeSpec, build_node
from k8stest.binaries import Binaries, find_binaries
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.node import (
    NodeBinaries,
    NodeConfig,
    RealNode,
    find_node_binaries,
    node_unavailable_reason,
    pod_log,
    start_node_control_plane,
    start_real_node,
    workload_pod,
    write_test_images,
)
from k8stest.node.plugins import (
    PLUGIN_NAMESPACE,
    create_plugin_identity,
    node_image_archive,
    plugin_identity,
    sample_daemonset,
)
from k8stest.process import port_is_listening

T = TypeVar("T")


PLUGIN_TIMEOUT_S = 60.0  # DaemonSets applied -> every kind's resources allocatable
POD_TIMEOUT_S = 60.0
HOTPLUG_TIMEOUT_S = 30.0

# Device nodes every container gets from runc; the pod's report leaves them out.
STANDARD_CONTAINER_DEVICES = frozenset(
    {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/console"}
)
STANDARD_CONTAINER_LINKS = ("/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/ptmx", "/dev/core")
# What the workload pod reports: its device nodes and links (all of /dev below the standard entries)
# and the environment a plugin may have set.
WORKLOAD_SCRIPT = (
    "for f in /dev/* /dev/*/* /dev/*/*/*; do"
    ' if [ -L "$f" ]; then echo "link $f -> $(readlink $f)"; elif [ -c "$f" ]; then echo "chardev $f"; fi;'
    ' done; env | while read -r line; do echo "env $line"; done'
)
# Environment every container has; the report leaves it out.
STANDARD_ENV_PREFIXES = ("KUBERNETES_", "PATH=", "HOME=", "HOSTNAME=", "SHLVL=", "PWD=", "TERM=")


# ----- prerequisites (pure) --------------------------------------------------------------------


@dataclass(frozen=True)
class Missing:
    """One missing prerequisite and the command that provides it."""

    what: str
    remedy: str


def missing_prerequisites(
    *, is_root: bool, host_problem: str, k8s_problem: str, node_problem: str, has_node_image: bool
) -> list[Missing]:
    """What the real runtime lacks, given the probes' answers ("" = fine)."""
    missing = []
    if not is_root:
        missing.append(Missing("root", "run the demo as root (sudo)"))
    elif host_problem:
        missing.append(Missing(host_problem, "see docs/node.md"))
    if k8s_problem:
        missing.append(Missing("the Kubernetes binaries", "test/k8s/build.sh"))
    if node_problem:
        missing.append(Missing("the node binaries (kubelet, containerd, runc)", "test/node/build.sh"))
    if not has_node_image:
        missing.append(Missing("the node image archive", "make images"))
    return missing


def prerequisite_message(missing: Sequence[Missing]) -> str:
    """One line naming everything missing and the command for each."""
    return "--node-runtime real needs " + "; ".join(f"{m.what} (run: {m.remedy})" for m in missing)


@dataclass(frozen=True)
class Prerequisites:
    k8s: Binaries
    node: NodeBinaries
    node_image: Path


def find_prerequisites() -> tuple[Prerequisites | None, list[Missing]]:
    """Probe this machine for what the real node needs."""
    is_root = os.geteuid() == 0
    k8s, k8s_problem = find_binaries()
    node, node_problem = find_node_binaries()
    archive = node_image_archive()
    missing = missing_prerequisites(
        is_root=is_root,
        host_problem=node_unavailable_reason() if is_root else "",
        k8s_problem=k8s_problem,
        node_problem=node_problem,
        has_node_image=archive is not None,
    )
    if missing or k8s is None or node is None or archive is None:
        return None, missing
    return Prerequisites(k8s, node, archive), []


# ----- the cluster ---------------------------------------------------------------------------


@dataclass
class DemoCluster:
    """A control plane and one real node; :meth:`stop` tears both down and lists leftovers."""

    control_plane: ControlPlane
    node: RealNode

    def client(self) -> KubeClient:
        return self.control_plane.client()

    def stop(self) -> list[str]:
        leftovers = []
        try:
            self.node.stop()
        except RuntimeError as e:  # cgroups still busy
            leftovers.append(str(e))
        self.control_plane.stop()
        processes = [self.node.process, *self.control_plane.processes]
        leftovers += [f"process {p.name} (pid {p.pid}) still running" for p in processes if p.alive()]
        leftovers += [
            f"port {port} still listening"
            for port in self.control_plane.ports.all()
            if port_is_listening(port)
        ]
        leftovers += [
            f"cgroup {h / self.node.layout.cgroup.lstrip('/')}"
            for h in self.node.hierarchies
            if (h / self.node.layout.cgroup.lstrip("/")).exists()
        ]
        return leftovers


def start_demo_cluster(
    prereqs: Prerequisites, workdir: Path, node_name: str, sim_root: Path, say: Callable[[str], None]
) -> DemoCluster:
    """Start the control plane and the real node with the simulated node's devices.

    The one place that decides how the demo's cluster comes up (networking, where the control plane
    runs), so a different setup changes only this function.
    """
    images = write_test_images(prereqs.node, workdir / "images" / "k8stest-busybox.tar")
    cp = start_node_control_plane(prereqs.k8s, workdir / "control-plane")
    say(f"control plane up in {cp.started_in:.1f} s")
    try:
        node = start_real_node(
            prereqs.node,
            cp,
            workdir / "node",
            NodeConfig(name=node_name),
            sim_root=sim_root,
            images=[images],
        )
    except BaseException:
        cp.stop()
        raise
    say(f"node {node.name} Ready in {node.started_in:.1f} s (kubelet + containerd + runc)")
    return DemoCluster(cp, node)


# ----- the scenario --------------------------------------------------------------------------


@dataclass(frozen=True)
class KindPlan:
    """One device kind of the profile on the real node."""

    kind: str
    namespace: str  # resource namespace, e.g. gpu.intel.com
    resources: tuple[str, ...]  # resources that must appear (beyond "some in the namespace")


def plan_kinds(spec: NodeSpec) -> tuple[list[KindPlan], dict[str, str]]:
    """(kinds to run on the real node, kinds skipped -> why), in the profile's order."""
    namespaces = {"gpu": "gpu.intel.com", **{kind: ns for kind, (_, ns) in OTHER_KINDS.items()}}
    run, skipped = [], {}
    for kind in spec.devices:
        if kind not in namespaces:
            skipped[kind] = "no device plugin for this simulator kind"
        else:
            wanted = tuple(expected_gpu_resources(spec)) if kind == "gpu" else ()
            run.append(KindPlan(kind, namespaces[kind], wanted))
    return run, skipped


def advertised(status: JSON, plan: KindPlan) -> bool:
    """Whether the Node's status shows the kind's resources with devices."""
    allocatable = status.get("allocatable", {})
    ours = {name: value for name, value in allocatable.items() if name.split("/")[0] == plan.namespace}
    if plan.resources:
        return all(int(ours.get(name, "0")) > 0 for name in plan.resources)
    return any(int(value) > 0 for value in ours.values())


def resource_table(status: JSON, namespaces: Sequence[str]) -> str:
    """RESOURCE / CAPACITY / ALLOCATABLE for the device resources of the Node's status."""
    capacity, allocatable = status.get("capacity", {}), status.get("allocatable", {})
    rows = [("RESOURCE", "CAPACITY", "ALLOCATABLE")]
    for name in sorted(set(capacity) | set(allocatable)):
        if name.split("/")[0] in namespaces:
            rows.append((name, str(capacity.get(name, "-")), str(allocatable.get(name, "-"))))
    return format_table(rows)


def describe_pod_output(log: str) -> list[str]:
    """The workload's report without the device nodes every container gets."""
    lines = []
    for line in log.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "chardev" and rest not in STANDARD_CONTAINER_DEVICES and not rest.startswith("/dev/pts/"):
            lines.append(f"device node {rest}")
        elif kind == "link" and not rest.startswith(STANDARD_CONTAINER_LINKS):
            lines.append(f"symlink {rest}")
        elif kind == "env" and not rest.startswith(STANDARD_ENV_PREFIXES):
            lines.append(f"env {rest}")
    return lines


def _timed(say: Callable[[str], None], what: str, step: Callable[[], T]) -> T:
    started = time.monotonic()
    result = step()
    say(f"{what} in {time.monotonic() - started:.1f} s")
    return result


@dataclass
class Scenario:
    cluster: DemoCluster
    client: KubeClient
    say: Callable[[str], None]
    daemonsets: list[str] = field(default_factory=list)

    @property
    def node_path(self) -> str:
        return f"/api/v1/nodes/{self.cluster.node.name}"

    def status(self) -> JSON:
        status: JSON = self.client.get(self.node_path)["status"]
        return status

    def apply_plugins(self, image: str, plans: Sequence[KindPlan]) -> None:
        """Each kind's DaemonSet as the operator builds it for the sample CR, the node labelled for
        it, and the plugin pods' ServiceAccount and RBAC that the operator's install ships (FPGA)."""
        self.client.apply_ok(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLUGIN_NAMESPACE}},
        )
        labels: dict[str, Any] = {}
        manifests = []
        for plan in plans:
            spec, ds = sample_daemonset(DeviceKind(plan.kind), image)
            labels.update(spec.get("nodeSelector", {}))
            manifests.append(ds)
            create_plugin_identity(self.client, plugin_identity(DeviceKind(plan.kind)))
        self.client.merge_patch(self.node_path, {"metadata": {"labels": labels}})
        for ds in manifests:
            self.client.create(f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets", ds)
            self.daemonsets.append(ds["metadata"]["name"])

    def wait_for_plugins(self, plans: Sequence[KindPlan]) -> list[KindPlan]:
        """Wait until every kind advertises (or the time is up); returns the kinds that did not."""
        deadline = time.monotonic() + PLUGIN_TIMEOUT_S
        while True:
            status = self.status()
            pending = [plan for plan in plans if not advertised(status, plan)]
            if not pending or time.monotonic() > deadline:
                return pending
            time.sleep(0.3)

    def plugin_pod_summary(self) -> list[str]:
        pods = self.client.get(f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods")["items"]
        lines = []
        for pod in pods:
            states = [
                next(iter(s.get("state", {})), "?") + (f" ({reason})" if (reason := _reason(s)) else "")
                for s in pod.get("status", {}).get("containerStatuses", [])
            ]
            lines.append(
                f"  {pod['metadata']['name']}: {pod['status'].get('phase')} {', '.join(states)}".rstrip()
            )
        return lines

    def run_workload(self, resource: str) -> tuple[str, str]:
        """A pod asking for one ``resource``; (its phase, its log)."""
        name = "demo-one-device"
        self.client.create(
            "/api/v1/namespaces/default/pods",
            workload_pod(name, self.cluster.node.name, WORKLOAD_SCRIPT, limits={resource: "1"}),
        )

        def finished() -> JSON | None:
            pod: JSON = self.client.get(f"/api/v1/namespaces/default/pods/{name}")
            return pod if pod.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        pod = wait_for(f"pod {name} to finish", finished, timeout=POD_TIMEOUT_S)
        return str(pod["status"]["phase"]), pod_log(self.cluster.node, "default", name)

    def allocatable(self, resource: str) -> int:
        return int(self.status().get("allocatable", {}).get(resource, "0"))

    def hotplug(self, resource: str) -> None:
        """A GPU card appears in the node's /sys and /dev, then goes again; allocatable follows."""
        node = self.cluster.node
        driver = resource.split("/")[1]
        before = self.allocatable(resource)
        tree = FakeTree(node.workdir)  # the node's /sys and /dev are <workdir>/sys and <workdir>/dev
        plugged_at = time.monotonic()
        card = gpu.add_card(tree, driver=driver, numa_node=0)
        node.realize_device_nodes()  # runc needs real character devices
        after = wait_for(
            f"{resource} to rise after the hot-plug",
            lambda: (value := self.allocatable(resource)) > before and value,
            timeout=HOTPLUG_TIMEOUT_S,
        )
        self.say(
            f"\nHot-plugged card{card.index} ({driver}, {card.address}): allocatable {resource} went from "
            f"{before} to {after} in {time.monotonic() - plugged_at:.1f} s"
        )
        unplugged_at = time.monotonic()
        gpu.remove_card(tree, card.index)
        wait_for(
            f"{resource} back to {before} after the unplug",
            lambda: self.allocatable(resource) == before,
            timeout=HOTPLUG_TIMEOUT_S,
        )
        self.say(
            f"Hot-unplugged card{card.index}: back to {before} in {time.monotonic() - unplugged_at:.1f} s"
        )


def _reason(container_status: JSON) -> str:
    state = container_status.get("state", {})
    for detail in state.values():
        if isinstance(detail, dict) and detail.get("reason"):
            return str(detail["reason"])
    return ""


@contextmanager
def _cluster(
    prereqs: Prerequisites, workdir: Path, spec: NodeSpec, say: Callable[[str], None], result: list[str]
) -> Iterator[DemoCluster]:
    sim_root = workdir / "sim"
    build_node(spec, sim_root)
    cluster = start_demo_cluster(prereqs, workdir, spec.name, sim_root, say)
    try:
        yield cluster
    finally:
        started = time.monotonic()
        result.extend(cluster.stop())
        say(f"\nnode and control plane stopped in {time.monotonic() - started:.1f} s")


@contextmanager
def _workdir(given: Path | None, result: list[str]) -> Iterator[Path]:
    """``given``, or a temporary directory removed afterwards (a failure to remove it is a leftover)."""
    if given is not None:
        yield given
        return
    path = Path(tempfile.mkdtemp(prefix="idp-demo-real-"))
    try:
        yield path
    finally:
        try:
            shutil.rmtree(path)
        except OSError as e:
            result.append(f"work directory {path} ({e})")


def run_real_demo(spec: NodeSpec, say: Callable[[str], None], workdir: Path | None = None) -> int:
    """The scenario; 0 only when every step worked and nothing was left behind."""
    prereqs, missing = find_prerequisites()
    if prereqs is None:
        say(prerequisite_message(missing))
        return 2
    plans, skipped = plan_kinds(spec)
    if not plans:
        say("The node has no devices whose plugins run on the real node; nothing to demonstrate.")
        return 1
    say(f"Simulated node {spec.name!r}: {', '.join(spec.devices)}")
    for kind, why in skipped.items():
        say(f"  skipped: {kind} ({why})")
    ok = False
    leftovers: list[str] = []
    try:
        with _workdir(workdir, leftovers) as work, _cluster(prereqs, work, spec, say, leftovers) as cluster:
            ok = _scenario(cluster, prereqs.node_image, plans, say)
    except (TimeoutError, ApiError, RuntimeError, OSError) as e:  # the cluster did not come up
        say(f"\nFailed: {e}")
    say(f"Left behind: {'; '.join(leftovers) if leftovers else 'nothing'}")
    return 0 if ok and not leftovers else 1


def _scenario(
    cluster: DemoCluster, archive: Path, plans: Sequence[KindPlan], say: Callable[[str], None]
) -> bool:
    """Image, plugins, table, a pod, a hot-plug on a running cluster; True when every step worked."""
    ok = True
    client = cluster.client()
    try:
        scenario = Scenario(cluster, client, say)
        image = _timed(
            say,
            f"node image {archive.name} imported",
            lambda: cluster.node.import_images(archive),
        )[0]
        started = time.monotonic()
        scenario.apply_plugins(image, plans)
        say(
            "Plugin DaemonSets applied (the operator's, for the sample CRs): "
            + ", ".join(scenario.daemonsets)
        )
        pending = scenario.wait_for_plugins(plans)
        elapsed = time.monotonic() - started
        say(f"{len(plans) - len(pending)} of {len(plans)} kinds allocatable in {elapsed:.1f} s\n")
        say(resource_table(scenario.status(), [plan.namespace for plan in plans]))
        if pending:
            ok = False
            say(f"\nNot allocatable within {PLUGIN_TIMEOUT_S:.0f} s: {', '.join(p.kind for p in pending)}")
            for line in scenario.plugin_pod_summary():
                say(line)
        resource = _workload_resource(scenario.status(), plans)
        if resource:
            started = time.monotonic()
            phase, log = scenario.run_workload(resource)
            say(f"\nA pod asks for 1 x {resource}: {phase} in {time.monotonic() - started:.1f} s; it saw:")
            for line in describe_pod_output(log) or ["(no device nodes)"]:
                say(f"  {line}")
            ok = ok and phase == "Succeeded"
        gpu_resources = [
            r for p in plans if p.kind == "gpu" for r in p.resources if not r.endswith("/monitoring")
        ]
        if not gpu_resources:
            say("\nNo GPU on this node, so no hot-plug.")
        elif not any(p.kind == "gpu" for p in pending):
            scenario.hotplug(gpu_resources[0])
    except (TimeoutError, ApiError, RuntimeError) as e:
        ok = False
        say(f"\nFailed: {e}")
    finally:
        client.close()
    return ok


def _workload_resource(status: JSON, plans: Sequence[KindPlan]) -> str:
    """The resource the workload pod asks for: the first GPU driver's, else any allocatable one."""
    allocatable = status.get("allocatable", {})
    for plan in plans:
        candidates = [r for r in plan.resources if not r.endswith("/monitoring")] or sorted(
            name for name in allocatable if name.split("/")[0] == plan.namespace
        )
        for name in candidates:
            if int(allocatable.get(name, "0")) > 0:
                return name
    return ""
