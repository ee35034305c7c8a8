"""The RMD operator on the real control plane (kube-apiserver 1.37.2, KCM, scheduler, kwok nodes).

Set-up, once for the module, as docs/rmd.md tells users to install: ``kubectl apply -k deploy/rmd/default``
(CRDs, namespace, RBAC, Deployment, RMD's configuration), the Secrets ``intel-rmd-certs`` prints, kwok nodes
labelled for RDT and the sample RmdConfig. The operator's Deployment is scaled to 0 and the operator runs
here as a process with its ServiceAccount's token (so the shipped RBAC is all it has), the Deployment's
flags, its client certificate read from the Secret, and one ``--rmd-endpoint`` per node. Each node's RMD is
the simulator started from the ``rmd`` DaemonSet the operator created: its command's arguments, with the
ConfigMap and Secrets it mounts laid out in a directory of its own, so RMD's ACL is the shipped one.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cryptography import x509

from intel_device_plugins.rmd import rotation
from intel_device_plugins.rmd.reconcile import (
    NFD_RDT_LABEL,
    RMD_CLIENT_SECRET,
    RMD_CONFIG_MAP,
    RMD_SERVER_SECRET,
    SERVER_TLS_ANNOTATION,
)
from intel_device_plugins.sim.rmd import lay_out_container
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.kubeletapi import podresources_v1_pb2 as pr_pb
from k8stest.kubeletapi import podresources_v1_pb2_grpc as pr_grpc
from k8stest.kwok import create_kwok_nodes, delete_kwok_nodes
from k8stest.ports import release_all, reserve_ports
from k8stest.process import ManagedProcess, port_is_listening
from tests.rmd.test_rmd_model import CORE_IDS_REFUSED

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
NS = "intel-rmd"
SAMPLES = ROOT / "deploy" / "rmd" / "samples"
API = "/apis/intel.com/v1alpha1"
TIMEOUT = 30.0


def _client_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.check_hostname = False
    return ctx


class Rmd:
    """One simulated RMD process run as the DaemonSet's container, and a small client for the test's look."""

    def __init__(
        self, node: str, root: Path, arguments: list[str], client_dir: Path, logs: Path, port: int
    ) -> None:
        self.node = node
        self.root = root
        self.arguments = arguments
        self.port = port
        self.logs = logs
        self.client_dir = client_dir
        self.proc: ManagedProcess | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        # The container's own arguments; only where it listens differs (one port per node on this host).
        argv = [
            sys.executable,
            "-m",
            "intel_device_plugins.sim.rmd",
            "--root",
            str(self.root),
            *self.arguments,
            "--address",
            "127.0.0.1",
            "--tlsport",
            str(self.port),
        ]
        self.proc = ManagedProcess(
            f"rmd-{self.node}", argv, self.logs / f"rmd-{self.node}.log", env=dict(os.environ)
        )
        try:
            wait_for(f"RMD for {self.node}", lambda: port_is_listening(self.port), timeout=15)
        except BaseException:
            self.stop()  # the owner never gets this object when the constructor's start fails
            raise

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def workloads(self) -> list[dict[str, Any]]:
        # The client certificate as the operator has it now (a rotation changes it).
        ctx = _client_context(*(self.client_dir / k for k in ("ca.crt", "tls.crt", "tls.key")))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=5)
        try:
            conn.request("GET", "/v1/workloads")
            data: list[dict[str, Any]] = json.loads(conn.getresponse().read())
            return data
        finally:
            conn.close()

    def uuids(self) -> set[str]:
        return {str(w.get("uuid")) for w in self.workloads()}


@dataclass
class Setup:
    cp: ControlPlane
    admin: KubeClient
    nodes: list[str]
    rmds: dict[str, Rmd]
    operator: ManagedProcess
    workdir: Path
    namespaces: list[str] = field(default_factory=list)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.cp.binaries.path("kubectl")), f"--kubeconfig={self.cp.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {out.stderr}")
        return out

    def namespace(self) -> str:
        name = f"rmd-{uuid.uuid4().hex[:6]}"
        self.admin.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        self.namespaces.append(name)
        return name

    def workload(self, namespace: str, name: str) -> JSON:
        return self.admin.get(f"{API}/namespaces/{namespace}/rmdworkloads/{name}")


def _install_secrets(setup: Setup) -> Path:
    """``intel-rmd-certs --namespace intel-rmd | kubectl apply -f -``; returns the client Secret as the
    operator's Deployment mounts it (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    certs = subprocess.run(
        [str(Path(sys.executable).parent / "intel-rmd-certs"), "--namespace", NS],
        capture_output=True,
        text=True,
        check=True,
    )
    setup.kubectl("apply", "-f", "-", stdin=certs.stdout)
    client_dir = setup.workdir / "client-tls"
    client_dir.mkdir()
    for key, data in _secret_data(setup, RMD_CLIENT_SECRET).items():
        (client_dir / key).write_bytes(data)
    return client_dir


def _secret_data(setup: Setup, name: str) -> dict[str, bytes]:
    secret = setup.admin.get(f"/api/v1/namespaces/{NS}/secrets/{name}")
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _rmd_pods(setup: Setup, client_dir: Path, ports: dict[str, int], rmds: dict[str, Rmd]) -> None:
    """One simulated RMD per node, run as the operator's ``rmd`` DaemonSet describes its container; each
    goes into ``rmds`` as soon as it runs, so that the caller stops those started before a failure."""

    def daemonset() -> JSON | None:
        try:
            return setup.admin.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/rmd")
        except ApiError:
            return None

    pod = wait_for("the rmd DaemonSet", daemonset, timeout=TIMEOUT)["spec"]["template"]["spec"]
    config = setup.admin.get(f"/api/v1/namespaces/{NS}/configmaps/{RMD_CONFIG_MAP}")
    sources = {
        ("configMap", RMD_CONFIG_MAP): {k: v.encode() for k, v in config["data"].items()},
        ("secret", RMD_SERVER_SECRET): _secret_data(setup, RMD_SERVER_SECRET),
        ("secret", RMD_CLIENT_SECRET): _secret_data(setup, RMD_CLIENT_SECRET),
    }
    for node, port in ports.items():
        root = setup.workdir / f"rmd-{node}"
        arguments = lay_out_container(pod, "rmd", sources, root)
        rmds[node] = Rmd(node, root, arguments, client_dir, setup.workdir, port)


@pytest.fixture(scope="module")
def setup(k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    cp = k8s_control_plane
    workdir = tmp_path_factory.mktemp("rmd")
    admin = cp.client()
    probe = Setup(cp, admin, [], {}, None, workdir)  # type: ignore[arg-type]
    probe.kubectl("apply", "-k", str(ROOT / "deploy" / "rmd" / "default"))
    probe.kubectl("wait", "--for=condition=Established", "crd/rmdworkloads.intel.com", "--timeout=60s")
    probe.kubectl("scale", "-n", NS, "deployment", "intel-rmd-operator", "--replicas=0")
    client_dir = _install_secrets(probe)
    nodes = create_kwok_nodes(admin, 2, prefix="rmd-node-", labels={NFD_RDT_LABEL: "true"})
    nodes += create_kwok_nodes(admin, 1, prefix="plain-node-")
    reserved = reserve_ports(2)
    ports = {n: r.port for n, r in zip(nodes[:2], reserved, strict=True)}
    sa_kubeconfig = cp.service_account_kubeconfig(NS, "intel-rmd-operator")
    argv = [
        sys.executable,
        "-m",
        "intel_device_plugins.rmd.operator",
        "--tls-dir",
        str(client_dir),
        "--workload-resync",
        "5",
        "--config-resync",
        "5",
        "--cert-rotation-grace",
        "3",
        "--tls-reload-period",
        "1",
        "--cleanup-grace",
        "5",
        *[f"--rmd-endpoint={n}=https://127.0.0.1:{port}" for n, port in ports.items()],
    ]
    env = {
        **os.environ,
        "KUBECONFIG": str(sa_kubeconfig),
        "POD_NAMESPACE": NS,
        "POD_NAME": "intel-rmd-operator-test",
    }
    operator = ManagedProcess("intel-rmd-operator", argv, workdir / "operator.log", env=env)
    rmds: dict[str, Rmd] = {}
    s = Setup(cp, admin, nodes, rmds, operator, workdir)
    try:
        _config(probe)
        _rmd_pods(probe, client_dir, ports, rmds)
        yield s
    finally:
        operator.stop()
        log = (workdir / "operator.log").read_text()
        for rmd in rmds.values():
            rmd.stop()
        release_all(reserved)
        for ns in s.namespaces:
            s.kubectl("delete", "rmdworkloads", "--all", "-n", ns, "--wait=false", check=False)
            for w in s.admin.get(f"{API}/namespaces/{ns}/rmdworkloads").get("items", []):
                s.admin.merge_patch(
                    f"{API}/namespaces/{ns}/rmdworkloads/{w['metadata']['name']}",
                    {"metadata": {"finalizers": None}},
                )
            s.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        s.kubectl("delete", "rmdconfig", "--all", "-n", NS, "--wait=false", check=False)
        s.kubectl("delete", "-k", str(ROOT / "deploy" / "rmd" / "default"), "--wait=false", check=False)
        delete_kwok_nodes(admin, nodes)
        admin.close()
    forbidden = [line for line in log.splitlines() if "forbidden" in line.lower()]
    assert not forbidden, "the operator hit RBAC denials with the shipped roles:\n" + "\n".join(forbidden)


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / name).read_text())
    return doc


def _config(setup: Setup, selector: dict[str, str] | None = None) -> None:
    cfg = _load("rmdconfig.yaml")
    cfg["spec"]["deployNodeAgent"] = False
    if selector is not None:
        cfg["spec"]["rmdNodeSelector"] = selector
    setup.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(cfg))


def test_schema_rejects_what_upstream_accepted(setup: Setup) -> None:
    ns = setup.namespace()
    for path in sorted((SAMPLES / "stale").glob("*.yaml")):
        out = setup.kubectl("apply", "-n", ns, "-f", str(path), check=False)
        assert (
            out.returncode != 0 and "stale v0.1 layout: move max and min to spec.rdt.cache" in out.stderr
        ), out
    bad = _load("rmdworkload-guaranteed-cache.yaml")
    bad["spec"]["rdt"]["cache"] = {"max": 1, "min": 2}
    bad["spec"]["rdt"]["mba"] = {"percentage": 150}
    out = setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(bad), check=False)
    assert "max must be greater than or equal to min" in out.stderr
    assert "should be less than or equal to 100" in out.stderr
    cfg = _load("rmdconfig.yaml")
    cfg["metadata"]["name"] = "another"
    out = setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(cfg), check=False)
    assert "RmdConfig is a singleton: metadata.name must be rmdconfig" in out.stderr
    for path in sorted(SAMPLES.glob("rmdworkload-*.yaml")):
        setup.kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(path))
    no_cache = _load("rmdworkload-guaranteed-cache-mba.yaml")
    del no_cache["spec"]["rdt"]["cache"]
    out = setup.kubectl(
        "apply", "--dry-run=server", "-n", ns, "-f", "-", stdin=json.dumps(no_cache), check=False
    )
    assert out.returncode != 0 and "rdt.mba needs rdt.cache" in out.stderr, out.stderr
    # The CRD and the operator share one rule for CPU lists (tests/rmd/test_rmd_model.py).
    for value in CORE_IDS_REFUSED:
        bad = _load("rmdworkload-guaranteed-cache.yaml")
        bad["spec"]["coreIds"] = [value]
        out = setup.kubectl(
            "apply", "--dry-run=server", "-n", ns, "-f", "-", stdin=json.dumps(bad), check=False
        )
        assert out.returncode != 0 and "spec.coreIds[0]" in out.stderr, (value, out.stderr)


def test_config_deploys_rmd_and_node_states(setup: Setup) -> None:
    _config(setup)
    rdt_nodes = sorted(setup.rmds)

    def config_nodes() -> list[str] | None:
        status = setup.admin.get(f"{API}/namespaces/{NS}/rmdconfigs/rmdconfig").get("status") or {}
        return status.get("nodes") if status.get("nodes") == rdt_nodes else None

    wait_for("RmdConfig status.nodes", config_nodes, timeout=TIMEOUT)
    ds = setup.admin.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/rmd")
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {NFD_RDT_LABEL: "true"}
    for node in rdt_nodes:
        wait_for(
            f"node state of {node}",
            lambda n=node: (  # type: ignore[misc]
                setup.admin.get(f"{API}/namespaces/{NS}/rmdnodestates/rmd-node-state-{n}")
                .get("status", {})
                .get("lastSync")
            ),
            timeout=TIMEOUT,
        )
    with pytest.raises(ApiError):
        setup.admin.get(f"{API}/namespaces/{NS}/rmdnodestates/rmd-node-state-{setup.nodes[2]}")


def _enforced(setup: Setup, ns: str, name: str, want: str) -> JSON | None:
    w = setup.workload(ns, name)
    return w if (w.get("status") or {}).get("enforced") == want else None


def _sample_on(
    setup: Setup, ns: str, sample: str, name: str | None = None, cores: list[str] | None = None
) -> str:
    doc = _load(sample)
    if name:
        doc["metadata"]["name"] = name
    if cores:
        doc["spec"]["coreIds"] = cores
    if "nodes" in doc["spec"]:
        doc["spec"]["nodes"] = sorted(setup.rmds)
    setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(doc))
    return str(doc["metadata"]["name"])


@pytest.mark.parametrize(
    "sample",
    [
        "rmdworkload-guaranteed-cache.yaml",
        "rmdworkload-guaranteed-cache-mba.yaml",
        "rmdworkload-guaranteed-cache-pstate.yaml",
        "rmdworkload-besteffort-cache.yaml",
        "rmdworkload-guaranteed-cache-all-cores.yaml",
    ],
)
def test_samples_are_enforced_and_removed(setup: Setup, sample: str) -> None:
    _config(setup)
    ns = setup.namespace()
    name = _sample_on(setup, ns, sample)
    w = wait_for(f"{sample} enforced", lambda: _enforced(setup, ns, name, "2/2"), timeout=TIMEOUT)
    for node, rmd in setup.rmds.items():
        state = w["status"]["workloadStates"][node]
        assert state["status"] == "Successful" and state["response"].startswith("Success")
        assert f"{ns}/{name}" in rmd.uuids()
    if "pstate" in sample:
        assert state["plugins"]["pstate"] == {"ratio": "3.000000", "monitoring": "on"}
    setup.kubectl("delete", "rmdworkload", name, "-n", ns, "--timeout=60s")
    for rmd in setup.rmds.values():
        assert f"{ns}/{name}" not in rmd.uuids()


def _twin_probe(setup: Setup, ns: str) -> Callable[[], JSON | None]:
    return lambda: _enforced(setup, ns, "twin", "2/2")


def test_same_name_in_two_namespaces(setup: Setup) -> None:
    _config(setup)
    ns_a, ns_b = setup.namespace(), setup.namespace()
    _sample_on(setup, ns_a, "rmdworkload-guaranteed-cache.yaml", "twin", ["10-11"])
    _sample_on(setup, ns_b, "rmdworkload-guaranteed-cache.yaml", "twin", ["12-13"])
    for ns in (ns_a, ns_b):
        wait_for(f"{ns}/twin enforced", _twin_probe(setup, ns), timeout=TIMEOUT)
    for rmd in setup.rmds.values():
        assert {f"{ns_a}/twin", f"{ns_b}/twin"} <= rmd.uuids()
    setup.kubectl("delete", "rmdworkload", "twin", "-n", ns_a, "--timeout=60s")
    for rmd in setup.rmds.values():
        uuids = rmd.uuids()
        assert f"{ns_a}/twin" not in uuids and f"{ns_b}/twin" in uuids
    setup.kubectl("delete", "rmdworkload", "twin", "-n", ns_b, "--timeout=60s")


def test_node_selector_changes_move_the_workload(setup: Setup) -> None:
    _config(setup)
    n1, n2 = sorted(setup.rmds)
    ns = setup.namespace()
    label = "rmd-test.intel.com/pool"
    setup.admin.merge_patch(f"/api/v1/nodes/{n1}", {"metadata": {"labels": {label: "a"}}})
    doc = _load("rmdworkload-guaranteed-cache-nodeselector.yaml")
    doc["metadata"]["name"] = "moving"
    doc["spec"] = {"coreIds": ["20-21"], "rdt": {"cache": {"max": 1, "min": 1}}, "nodeSelector": {label: "a"}}
    setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(doc))
    wait_for("on n1", lambda: f"{ns}/moving" in setup.rmds[n1].uuids() or None, timeout=TIMEOUT)
    assert f"{ns}/moving" not in setup.rmds[n2].uuids()
    setup.admin.merge_patch(f"/api/v1/nodes/{n1}", {"metadata": {"labels": {label: None}}})
    setup.admin.merge_patch(f"/api/v1/nodes/{n2}", {"metadata": {"labels": {label: "a"}}})
    wait_for(
        "moved to n2",
        lambda: (
            (f"{ns}/moving" in setup.rmds[n2].uuids() and f"{ns}/moving" not in setup.rmds[n1].uuids())
            or None
        ),
        timeout=TIMEOUT,
    )
    w = wait_for("status follows", lambda: _enforced(setup, ns, "moving", "1/1"), timeout=TIMEOUT)
    assert set(w["status"]["workloadStates"]) == {n2}
    setup.admin.merge_patch(f"/api/v1/nodes/{n2}", {"metadata": {"labels": {label: None}}})
    setup.kubectl("delete", "rmdworkload", "moving", "-n", ns, "--timeout=60s")


def test_rmd_restart_keeps_state_then_restores(setup: Setup) -> None:
    _config(setup)
    n1 = sorted(setup.rmds)[0]
    ns = setup.namespace()
    name = _sample_on(setup, ns, "rmdworkload-guaranteed-cache.yaml", "survivor", ["24-25"])
    wait_for("enforced", lambda: _enforced(setup, ns, name, "2/2"), timeout=TIMEOUT)
    state_path = f"{API}/namespaces/{NS}/rmdnodestates/rmd-node-state-{n1}"
    wait_for(
        "node state lists the workload",
        lambda: (
            f"{ns}/{name}" in ((setup.admin.get(state_path).get("status") or {}).get("workloads") or {})
            or None
        ),
        timeout=TIMEOUT,
    )
    setup.rmds[n1].stop()

    def stale() -> JSON | None:
        st = setup.admin.get(state_path).get("status") or {}
        return st if st.get("stale") else None

    st = wait_for("node state marked stale", stale, timeout=TIMEOUT)
    assert f"{ns}/{name}" in st["workloads"], "the last known workloads are kept while RMD is away"
    setup.rmds[n1].start()  # a fresh RMD: it has lost every workload
    wait_for(
        "re-created on the restarted RMD",
        lambda: f"{ns}/{name}" in setup.rmds[n1].uuids() or None,
        timeout=TIMEOUT,
    )
    wait_for(
        "node state fresh",
        lambda: not (setup.admin.get(state_path).get("status") or {}).get("stale") or None,
        timeout=TIMEOUT,
    )
    setup.kubectl("delete", "rmdworkload", name, "-n", ns, "--timeout=60s")


class _PodResources(pr_grpc.PodResourcesListerServicer):
    """The kubelet's PodResources List for the agent's node: what the static CPU manager would report."""

    def __init__(self) -> None:
        self.cpus: dict[tuple[str, str], dict[str, list[int]]] = {}

    def List(self, request: Any, context: Any) -> pr_pb.ListPodResourcesResponse:
        return pr_pb.ListPodResourcesResponse(
            pod_resources=[
                pr_pb.PodResources(
                    name=name,
                    namespace=ns,
                    containers=[
                        pr_pb.ContainerResources(name=c, cpu_ids=ids) for c, ids in containers.items()
                    ],
                )
                for (ns, name), containers in self.cpus.items()
            ]
        )


@pytest.fixture(scope="module")
def agent(setup: Setup) -> Iterator[tuple[str, _PodResources]]:
    """The node agent for one RMD node, with a PodResources socket standing in for that node's kubelet."""
    node = sorted(setup.rmds)[0]
    # The kwok node offers the extended resource the device plugin would register there.
    capacity = {"intel.com/l3_cache_ways": "12", "cpu": "32", "memory": "64Gi", "pods": "110"}
    setup.admin.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"capacity": capacity, "allocatable": capacity}},
        content_type="application/merge-patch+json",
    )
    lister = _PodResources()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    sock = setup.workdir / "pod-resources.sock"
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    kubeconfig = setup.cp.service_account_kubeconfig(NS, "intel-rmd-node-agent")
    argv = [
        sys.executable,
        "-m",
        "intel_device_plugins.rmd.nodeagent",
        "--node-name",
        node,
        "--pod-resources-socket",
        f"unix://{sock}",
        "--resync",
        "2",
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    proc = ManagedProcess("intel-rmd-node-agent", argv, setup.workdir / "agent.log", env=env)
    try:
        yield node, lister
    finally:
        proc.stop()
        server.stop(None)
    log = (setup.workdir / "agent.log").read_text()
    assert "forbidden" not in log.lower(), log


def test_pod_with_cache_ways_and_mba_becomes_an_enforced_workload(
    setup: Setup, agent: tuple[str, _PodResources]
) -> None:
    _config(setup)
    node, lister = agent
    ns = setup.namespace()
    pod = _load("pod-guaranteed-cache-mba.yaml")
    pod["spec"]["nodeName"] = node
    lister.cpus[(ns, pod["metadata"]["name"])] = {"container1": [28, 29, 30]}
    setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(pod))
    name = f"{pod['metadata']['name']}-rmd-workload-container1"
    w = wait_for("workload from the pod enforced", lambda: _enforced(setup, ns, name, "1/1"), timeout=TIMEOUT)
    assert w["spec"] == {
        "coreIds": ["28-30"],
        "rdt": {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}},
        "nodes": [node],
    }
    assert w["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    state = w["status"]["workloadStates"][node]
    assert state["rdt"] == {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}
    assert f"{ns}/{name}" in setup.rmds[node].uuids()
    # An annotation change reaches RMD.
    setup.admin.merge_patch(
        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
        {"metadata": {"annotations": {"container1_mba_percentage": "30"}}},
    )
    wait_for(
        "new MBA on RMD",
        lambda: (
            any(
                w.get("uuid") == f"{ns}/{name}" and w["rdt"].get("mba") == {"percentage": 30}
                for w in setup.rmds[node].workloads()
            )
            or None
        ),
        timeout=TIMEOUT,
    )
    # Deleting the pod garbage-collects the workload, and the finalizer takes it off RMD.
    setup.kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--grace-period=0", "--force")
    wait_for("removed from RMD", lambda: f"{ns}/{name}" not in setup.rmds[node].uuids() or None, timeout=60)


def test_non_exclusive_container_gets_an_event(setup: Setup, agent: tuple[str, _PodResources]) -> None:
    node, _ = agent
    ns = setup.namespace()
    pod = _load("pod-guaranteed-cache.yaml")
    pod["metadata"]["name"] = "shared-cpus"
    pod["spec"]["nodeName"] = node
    for kind in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][kind]["cpu"] = "1500m"
    setup.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(pod))

    def event() -> JSON | None:
        items = setup.admin.get(f"/api/v1/namespaces/{ns}/events").get("items", [])
        return next((e for e in items if e.get("reason") == "RmdWorkloadNotCreated"), None)

    e = wait_for("event about the container", event, timeout=TIMEOUT)
    assert "has no exclusive CPUs" in e["message"]
    assert setup.admin.get(f"{API}/namespaces/{ns}/rmdworkloads").get("items") == []


def test_config_changes_move_rmd_and_the_node_agent(setup: Setup) -> None:
    n1, n2 = sorted(setup.rmds)
    label = "rmd-test.intel.com/rmd"
    setup.admin.merge_patch(f"/api/v1/nodes/{n2}", {"metadata": {"labels": {label: "yes"}}})
    cfg = _load("rmdconfig.yaml")
    cfg["spec"] = {"deployNodeAgent": True, "rmdNodeSelector": {label: "yes"}, "rmdImage": "example/rmd:test"}
    setup.kubectl("apply", "-n", NS, "-f", "-", stdin=json.dumps(cfg))
    ds_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets"

    def agent_ds() -> JSON | None:
        try:
            return setup.admin.get(f"{ds_path}/rmd-node-agent")
        except ApiError:
            return None

    agent = wait_for("node agent DaemonSet", agent_ds, timeout=TIMEOUT)
    assert agent["spec"]["template"]["spec"]["serviceAccountName"] == "intel-rmd-node-agent"
    assert agent["spec"]["template"]["spec"]["nodeSelector"] == {label: "yes"}
    rmd = setup.admin.get(f"{ds_path}/rmd")
    assert rmd["spec"]["template"]["spec"]["containers"][0]["image"] == "example/rmd:test"
    states = f"{API}/namespaces/{NS}/rmdnodestates"
    wait_for(
        "only the selected node keeps a node state",
        lambda: [s["spec"]["node"] for s in setup.admin.get(states)["items"]] == [n2] or None,
        timeout=TIMEOUT,
    )
    _config(setup)  # back to the NFD default and no agent
    wait_for("agent DaemonSet removed", lambda: agent_ds() is None or None, timeout=TIMEOUT)
    wait_for(
        "node states back on both RDT nodes",
        lambda: sorted(s["spec"]["node"] for s in setup.admin.get(states)["items"]) == [n1, n2] or None,
        timeout=TIMEOUT,
    )
    setup.admin.merge_patch(f"/api/v1/nodes/{n2}", {"metadata": {"labels": {label: None}}})


class _Kubelet:
    """The kubelet's part in a rotation, one pass between the test's probes (so no probe meets an RMD that is
    restarting): Secret volumes follow the Secrets (the operator's ``--tls-dir`` and every RMD's files, the
    admin directory included), and RMD restarts, one node per pass, when the DaemonSet's template carries
    another digest, as the kwok pods go through the rolling update the operator waits for."""

    def __init__(self, setup: Setup, client_dir: Path) -> None:
        self.setup = setup
        self.client_dir = client_dir
        self.started = {node: self._template()[0] for node in setup.rmds}
        self.restarts = 0

    def _template(self) -> tuple[str, JSON]:
        ds = self.setup.admin.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets/rmd")
        template = ds["spec"]["template"]
        digest = str((template["metadata"].get("annotations") or {}).get(SERVER_TLS_ANNOTATION, ""))
        return digest, template["spec"]

    def rolled_out(self) -> bool:
        digest = self._template()[0]
        return all(started == digest for started in self.started.values())

    def sync(self) -> dict[str, bytes]:
        """One kubelet pass; returns the client Secret's data."""
        client = _secret_data(self.setup, RMD_CLIENT_SECRET)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            tmp = self.client_dir / f".{key}.tmp"
            tmp.write_bytes(client[key])
            tmp.replace(self.client_dir / key)
        digest, pod = self._template()
        config = self.setup.admin.get(f"/api/v1/namespaces/{NS}/configmaps/{RMD_CONFIG_MAP}")
        sources = {
            ("configMap", RMD_CONFIG_MAP): {k: v.encode() for k, v in config["data"].items()},
            ("secret", RMD_SERVER_SECRET): _secret_data(self.setup, RMD_SERVER_SECRET),
            ("secret", RMD_CLIENT_SECRET): client,
        }
        restarted = False
        for node, rmd in sorted(self.setup.rmds.items()):
            lay_out_container(pod, "rmd", sources, rmd.root)
            if self.started[node] != digest and not restarted:
                rmd.stop()
                rmd.start()  # a new pod: RMD reads its serving certificate and client CA again
                self.started[node] = digest
                self.restarts += 1
                restarted = True
        return client


def _refused(rmd: Rmd, ca: bytes, cert: bytes, key: bytes, workdir: Path) -> str | None:
    """Why RMD refuses a client holding ``cert`` and trusting ``ca``, or None when it answers."""
    files = []
    for name, data in (("ca", ca), ("cert", cert), ("key", key)):
        path = workdir / f"probe-{name}.pem"
        path.write_bytes(data)
        files.append(path)
    conn = http.client.HTTPSConnection("127.0.0.1", rmd.port, context=_client_context(*files), timeout=5)
    try:
        conn.request("GET", "/v1/workloads")
        status = conn.getresponse().status
    except (ssl.SSLError, ConnectionResetError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return None if status == 200 else f"HTTP {status}"


def test_certificate_rotation_keeps_every_call_working(setup: Setup) -> None:
    """A rotation requested on the client Secret runs its three steps while the operator enforces workloads;
    at every moment the clients of the two newest Secret versions are let in by every RMD, and afterwards
    only the new CA is trusted and a new workload is enforced with the new certificate."""
    _config(setup)
    ns = setup.namespace()
    before = _sample_on(setup, ns, "rmdworkload-guaranteed-cache.yaml", "before-rotation", ["26-27"])
    wait_for("enforced before", lambda: _enforced(setup, ns, before, "2/2"), timeout=TIMEOUT)
    client_dir = setup.workdir / "client-tls"
    kubelet = _Kubelet(setup, client_dir)
    original = _secret_data(setup, RMD_CLIENT_SECRET)
    setup.kubectl("annotate", "secret", "-n", NS, RMD_CLIENT_SECRET, f"{rotation.ROTATE_ANNOTATION}=now")
    versions: list[dict[str, bytes]] = [original]
    refusals: list[str] = []
    responses: set[str] = set()
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, f"rotation unfinished; versions seen: {len(versions)}"
        client = kubelet.sync()
        if client != versions[-1]:
            versions.append(client)
        for version in versions[-2:]:  # clients may still hold the previous version
            for node, rmd in setup.rmds.items():
                why = _refused(rmd, version["ca.crt"], version["tls.crt"], version["tls.key"], setup.workdir)
                if why:
                    refusals.append(f"{node}, client Secret version {versions.index(version)}: {why}")
        states = (setup.workload(ns, before).get("status") or {}).get("workloadStates") or {}
        responses |= {str(s.get("response")) for s in states.values()}
        finished = (
            rotation.phase(rotation.Tls({}, client)) is rotation.Phase.STEADY
            and len(x509.load_pem_x509_certificates(client["ca.crt"])) == 1
            and client["ca.crt"] != original["ca.crt"]
            and kubelet.rolled_out()
        )
        if finished:
            break
        time.sleep(0.3)
    assert not refusals, "a client was refused during the rotation:\n" + "\n".join(refusals[:10])
    assert kubelet.restarts >= 3 * len(setup.rmds), "each step restarts every RMD once"
    failed = [r for r in responses if r.startswith("Fail") and "Cannot connect" not in r]
    assert not failed, f"the operator's calls failed other than while an RMD restarted: {failed}"
    server = _secret_data(setup, RMD_SERVER_SECRET)
    assert server["ca.crt"] == client["ca.crt"] and client["tls.crt"] != original["tls.crt"]
    assert _refused(
        setup.rmds[sorted(setup.rmds)[0]],
        original["ca.crt"],
        original["tls.crt"],
        original["tls.key"],
        setup.workdir,
    ), "the old client certificate is no longer let in"
    after = _sample_on(setup, ns, "rmdworkload-guaranteed-cache.yaml", "after-rotation", ["28-29"])
    wait_for("enforced after", lambda: _enforced(setup, ns, after, "2/2"), timeout=TIMEOUT)
    wanted = {f"{ns}/{before}", f"{ns}/{after}"}

    def everywhere() -> bool | None:  # restarted RMDs start empty; the operator enforces again
        return all(wanted <= rmd.uuids() for rmd in setup.rmds.values()) or None

    wait_for("both workloads on every RMD", everywhere, timeout=TIMEOUT)
    for name in (before, after):
        setup.kubectl("delete", "rmdworkload", name, "-n", ns, "--timeout=60s")
