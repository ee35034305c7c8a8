"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, KCM, scheduler and kwok.

Why real binaries: the operator, webhooks and DaemonSets must behave on genuine API semantics
(RBAC, admission, defaulting, the DaemonSet controller, the scheduler's extended-resource fit),
which no mock reproduces. Everything listens on 127.0.0.1 on ports reserved from :mod:`k8stest.ports`
and lives in one temporary directory, so several control planes can coexist and nothing survives
``stop()``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from k8stest.binaries import Binaries
from k8stest.kubeclient import ApiError, Credentials, KubeClient, wait_for
from k8stest.pki import Pki, make_pki
from k8stest.ports import ReservedPort, release_all, reserve_ports
from k8stest.process import ManagedProcess, port_is_listening

# An address nobody is contacted on: with --endpoint-reconciler-type=none the apiserver writes no
# Endpoints for it, but it needs a non-loopback advertise address to start without a default route.
ADVERTISE_ADDRESS = "192.0.2.1"  # TEST-NET-1 (RFC 5737)
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.0.0.0/24"
# The ``kubernetes`` Service's ClusterIP (the range's first address): in-cluster clients connect to
# it, so the serving certificate names it too.
KUBERNETES_SERVICE_IP = "10.0.0.1"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The stage files kwok >= 0.8 needs: nodes become Ready and keep heartbeating, pods on them
# become Running/Ready, and deletions complete.
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


@dataclass(frozen=True)
class ControlPlaneConfig:
    """Knobs for one control plane; the defaults suit a test session."""

    with_kwok: bool = True
    start_timeout: float = 60.0
    extra_apiserver_flags: tuple[str, ...] = ()
    # KCM waits this long without heartbeats before it taints a node unreachable; kwok's
    # heartbeat stage runs every 20-45 s, so the upstream default (50 s) is too tight for a busy CI.
    node_monitor_grace_period: str = "2m"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    def all(self) -> tuple[int, ...]:
        return (self.etcd_client, self.etcd_peer, self.apiserver, self.controller_manager, self.scheduler)


@dataclass
class ControlPlane:
    """A running control plane. Use :func:`start_control_plane`; call :meth:`stop` when done."""

    workdir: Path
    binaries: Binaries
    pki: Pki
    ports: Ports
    admin: Credentials
    admin_kubeconfig: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    started_in: float = 0.0
    # The reservations behind ``ports``, held until stop() (an API server restart keeps its port).
    reserved_ports: list[ReservedPort] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def client(self) -> KubeClient:
        """A new admin client (system:masters)."""
        return KubeClient(self.admin)

    def write_kubeconfig(self, name: str, creds: Credentials, namespace: str | None = None) -> Path:
        return _write_kubeconfig(self.workdir, name, creds, namespace)

    def service_account_credentials(
        self, namespace: str, name: str, *, create: bool = True, expiration_seconds: int = 3600
    ) -> Credentials:
        """A token for ``namespace/name`` via TokenRequest, creating the SA (and namespace) if asked.

        Why TokenRequest: it is the supported way to get a bound token today, and it proves the
        issuer/signing-key wiring that in-cluster clients of our operator rely on.
        """
        c = self.client()
        try:
            if create:
                c.apply_ok(
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
                c.apply_ok(
                    f"/api/v1/namespaces/{namespace}/serviceaccounts",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
                )
            resp = c.create(
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": expiration_seconds},
                },
            )
        finally:
            c.close()
        token = str(resp["status"]["token"])
        return Credentials(
            server=self.server,
            ca_pem=self.pki.ca_pem,
            token=token,
            user=f"system:serviceaccount:{namespace}:{name}",
        )

    def service_account_kubeconfig(self, namespace: str, name: str, *, create: bool = True) -> Path:
        creds = self.service_account_credentials(namespace, name, create=create)
        return self.write_kubeconfig(f"sa-{namespace}-{name}", creds, namespace=namespace)

    def restart_apiserver(
        self, *, down_for: float = 0.0, stop_timeout: float = 2.0, timeout: float = 60.0
    ) -> float:
        """Stop kube-apiserver (SIGTERM, SIGKILL after ``stop_timeout``), keep it down ``down_for`` seconds,
        start it again with the same flags, port and log, and wait for /readyz. Returns the seconds from the
        SIGTERM to /readyz answering ok.

        Why the short stop timeout: 1.36.3 closes its port at once on SIGTERM but may linger for many seconds
        afterwards (long-running requests draining); the outage a test wants is a restart, not that wait.

        etcd, KCM, the scheduler and kwok keep running, as during a real apiserver upgrade or crash;
        their watches reconnect on their own. Clients made by :meth:`client` need no change (same
        port, CA and tokens).
        """
        index = next(i for i, p in enumerate(self.processes) if p.name == "kube-apiserver")
        old = self.processes[index]
        t0 = time.monotonic()
        old.stop(timeout=stop_timeout)
        wait_for(
            "kube-apiserver port to close",
            lambda: not port_is_listening(self.ports.apiserver),
            timeout=timeout,
        )
        if down_for > 0:
            time.sleep(down_for)
        new = ManagedProcess(old.name, old.argv, old.log_path)
        self.processes[index] = new

        def ready() -> bool:
            new.check_alive()
            return _readyz(self.admin)

        wait_for("restarted kube-apiserver /readyz", ready, timeout=timeout)
        return time.monotonic() - t0

    def check_alive(self) -> None:
        for p in self.processes:
            p.check_alive()

    def stop(self) -> None:
        """Stop in reverse start order, wait until no port of ours is still listening, give the ports
        back."""
        for p in reversed(self.processes):
            p.stop()
        deadline = time.monotonic() + 10
        while any(port_is_listening(port) for port in self.ports.all()) and time.monotonic() < deadline:
            time.sleep(0.1)
        release_all(self.reserved_ports)


def _write_kubeconfig(workdir: Path, name: str, creds: Credentials, namespace: str | None = None) -> Path:
    path = workdir / "kubeconfigs" / f"{name}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(creds.kubeconfig(namespace=namespace))
    path.chmod(0o600)
    return path


def _write_tokens(path: Path) -> dict[str, str]:
    """A static token file: one admin (system:masters) and the identities of KCM and scheduler.

    Why distinct identities for KCM and the scheduler: then their bootstrap RBAC roles are what
    grants their access, as in a real cluster, and a policy regression shows up here.
    """
    tokens = {user: secrets.token_hex(16) for user in ("admin", "kcm", "scheduler")}
    lines = [
        f'{tokens["admin"]},admin,uid-admin,"system:masters"',
        f"{tokens['kcm']},system:kube-controller-manager,uid-kcm",
        f"{tokens['scheduler']},system:kube-scheduler,uid-scheduler",
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return tokens


def _kwok_config(bins: Binaries, path: Path) -> Path:
    docs = []
    for rel in KWOK_STAGE_FILES:
        docs.append(bins.kwok_stages.joinpath(rel).read_text().strip())
    path.write_text("\n---\n".join(docs) + "\n")
    return path


def _readyz(admin: Credentials) -> bool:
    c = KubeClient(admin, timeout=5)
    try:
        text = c.get("/readyz").get("text")
        return text == "ok"
    except (ApiError, OSError):
        return False
    finally:
        c.close()


def start_control_plane(
    bins: Binaries, workdir: Path, config: ControlPlaneConfig | None = None
) -> ControlPlane:
    """Start etcd, kube-apiserver, KCM, scheduler (and kwok) and wait until pods can be created."""
    cfg = config or ControlPlaneConfig()
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    pki = make_pki(workdir / "pki", hosts=("127.0.0.1", "localhost", KUBERNETES_SERVICE_IP))
    tokens = _write_tokens(workdir / "tokens.csv")
    reserved = reserve_ports(5)
    try:
        ports = Ports(*(r.port for r in reserved))
        server = f"https://127.0.0.1:{ports.apiserver}"
        admin = Credentials(server=server, ca_pem=pki.ca_pem, token=tokens["admin"], user="admin")
        cp = ControlPlane(
            workdir=workdir,
            binaries=bins,
            pki=pki,
            ports=ports,
            admin=admin,
            admin_kubeconfig=_write_kubeconfig(workdir, "admin", admin),
            reserved_ports=reserved,
        )
    except BaseException:
        release_all(reserved)
        raise
    try:
        kcm_kubeconfig = cp.write_kubeconfig(
            "kube-controller-manager",
            Credentials(server, pki.ca_pem, tokens["kcm"], "system:kube-controller-manager"),
        )
        scheduler_kubeconfig = cp.write_kubeconfig(
            "kube-scheduler", Credentials(server, pki.ca_pem, tokens["scheduler"], "system:kube-scheduler")
        )
        etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        cp.processes.append(
            ManagedProcess(
                "etcd",
                [
                    bins.path("etcd"),
                    "--name=k8stest",
                    f"--data-dir={workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=k8stest={peer_url}",
                    "--unsafe-no-fsync=true",
                    "--auto-compaction-retention=1",
                    "--quota-backend-bytes=8589934592",
                    "--log-level=warn",
                ],
                logs / "etcd.log",
            )
        )
        cp.processes.append(
            ManagedProcess(
                "kube-apiserver",
                [
                    bins.path("kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports.apiserver}",
                    f"--advertise-address={ADVERTISE_ADDRESS}",
                    "--endpoint-reconciler-type=none",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--client-ca-file={pki.ca_cert}",
                    f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                    f"--kubelet-client-key={pki.kubelet_client_key}",
                    f"--token-auth-file={workdir / 'tokens.csv'}",
                    f"--service-account-issuer={SA_ISSUER}",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    "--authorization-mode=Node,RBAC",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--allow-privileged=true",
                    # Default admission plugins stay on: KCM runs, so ServiceAccount admission works.
                    # No rate limits: 1000 kwok nodes heartbeat and a DaemonSet creates 1000 pods.
                    "--max-requests-inflight=0",
                    "--max-mutating-requests-inflight=0",
                    "--enable-priority-and-fairness=false",
                    "--profiling=false",
                    *cfg.extra_apiserver_flags,
                ],
                logs / "kube-apiserver.log",
            )
        )

        def apiserver_ready() -> bool:
            cp.check_alive()
            return _readyz(admin)

        wait_for("kube-apiserver /readyz", apiserver_ready, timeout=cfg.start_timeout)

        cp.processes.append(
            ManagedProcess(
                "kube-controller-manager",
                [
                    bins.path("kube-controller-manager"),
                    f"--kubeconfig={kcm_kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports.controller_manager}",
                    f"--service-account-private-key-file={pki.sa_key}",
                    f"--root-ca-file={pki.ca_cert}",
                    "--use-service-account-credentials=true",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                    "--kube-api-qps=500",
                    "--kube-api-burst=1000",
                    f"--node-monitor-grace-period={cfg.node_monitor_grace_period}",
                ],
                logs / "kube-controller-manager.log",
            )
        )
        cp.processes.append(
            ManagedProcess(
                "kube-scheduler",
                [
                    bins.path("kube-scheduler"),
                    f"--kubeconfig={scheduler_kubeconfig}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports.scheduler}",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                    "--kube-api-qps=500",
                    "--kube-api-burst=1000",
                ],
                logs / "kube-scheduler.log",
            )
        )
        if cfg.with_kwok:
            cp.processes.append(
                ManagedProcess(
                    "kwok",
                    [
                        bins.path("kwok"),
                        f"--kubeconfig={cp.admin_kubeconfig}",
                        f"--config={_kwok_config(bins, workdir / 'kwok.yaml')}",
                        "--manage-all-nodes=false",
                        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                        "--node-ip=10.1.0.1",
                        "--cidr=10.244.0.0/16",
                    ],
                    logs / "kwok.log",
                )
            )

        # Pods can be created once KCM's ServiceAccount controller made the default SA, which the
        # ServiceAccount admission plugin requires.
        def default_sa() -> bool:
            cp.check_alive()
            c = cp.client()
            try:
                c.get("/api/v1/namespaces/default/serviceaccounts/default")
                return True
            except ApiError as e:
                if e.status == 404:
                    return False
                raise
            finally:
                c.close()

        wait_for("the default ServiceAccount", default_sa, timeout=cfg.start_timeout)
    except BaseException:
        cp.stop()
        raise
    cp.started_in = time.monotonic() - t0
    return cp


@contextlib.contextmanager
def running_control_plane(
    bins: Binaries, workdir: Path, config: ControlPlaneConfig | None = None
) -> Iterator[ControlPlane]:
    """Context-manager form of :func:`start_control_plane`."""
    cp = start_control_plane(bins, workdir, config)
    try:
        yield cp
    finally:
        cp.stop()
