"""The operator installed from ``deploy/operator/self-signed`` on a harness control plane, run locally.

Shared by ``tests/operator/test_operator_cluster.py`` and ``bench/bench_operator_cluster.py``:

1. ``kubectl apply -k deploy/operator/self-signed``: CRDs, namespace, ServiceAccount, the shipped RBAC,
   webhook configurations, Service, the empty certificate Secret and the operator Deployment.
2. The Deployment is scaled to 0. Its pod would be scheduled onto a kwok node, which only pretends to run
   containers, so the operator runs here as a local process instead: the Deployment's own arguments and
   environment, with the ServiceAccount's token (TokenRequest) as its only credentials, so the shipped RBAC
   is all it has. Only the listening ports (reserved loopback ports, :mod:`k8stest.ports`) and the certificate
   directory differ.
3. The webhook Service becomes ``type: ExternalName`` with ``externalName: localhost`` and the webhook
   configurations' service port becomes the local operator's webhook port. The API server then calls the
   operator over TLS as in a cluster: by Service reference, checking the certificate against the Service's
   DNS name and the CA bundle that the operator itself issued and injected (self-managed mode).
"""

from __future__ import annotations

import datetime as dt
import http.client
import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

from intel_device_plugins.kube.leader import LEASE_NAME
from k8stest.binaries import repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, wait_for
from k8stest.ports import release_all, reserve_ports
from k8stest.process import ManagedProcess

NS = "inteldeviceplugins-system"
PREFIX = "intel-deviceplugins-"
SA = f"{PREFIX}controller-manager"
SECRET = f"{PREFIX}webhook-server-cert"
FPGA_PLUGIN_SA = f"{PREFIX}fpga-plugin"
DRA_DRIVER_SA = f"{PREFIX}dra-driver"
# Literal environment values of the shipped Deployment that the operator processes get as they are (the
# plugin image is left to each test).
DEPLOYMENT_ENV_PASSED = frozenset({"FPGA_PLUGIN_SERVICE_ACCOUNT", "DRA_DRIVER_SERVICE_ACCOUNT"})
SERVICE = f"{PREFIX}webhook-service"
WEBHOOK_CONFIGS = {
    "mutatingwebhookconfigurations": f"{PREFIX}mutating-webhook-configuration",
    "validatingwebhookconfigurations": f"{PREFIX}validating-webhook-configuration",
}


def overlay_dir() -> Path:
    root = repo_root()
    if root is None:
        raise RuntimeError("deploy/ is only available in a checkout of the repository")
    return root / "deploy" / "operator" / "self-signed"


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {out.stderr}")
        return out


class OperatorProcess:
    """``intel_deviceplugin_operator`` started the way the shipped Deployment starts it.

    It owns its process and its three ports: :meth:`retire` stops the one and releases the others.
    """

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], kubeconfig: Path, workdir: Path
    ) -> None:
        self.name = name
        self.reserved_ports = reserve_ports(3)
        self.health_port, self.metrics_port, self.webhook_port = (r.port for r in self.reserved_ports)
        self.cert_dir = workdir / f"{name}-certs"
        argv = []
        for arg in args:
            if arg.startswith("--health-probe-bind-address="):
                arg = f"--health-probe-bind-address=127.0.0.1:{self.health_port}"
            elif arg.startswith("--metrics-bind-address="):
                arg = f"--metrics-bind-address=127.0.0.1:{self.metrics_port}"
            argv.append(arg)
        argv += [f"--webhook-port={self.webhook_port}", f"--webhook-cert-dir={self.cert_dir}"]
        exe = Path(sys.executable).with_name("intel_deviceplugin_operator")
        self.argv = [str(exe), *argv]
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        self.env = {**keep, **env, "POD_NAME": name, "KUBECONFIG": str(kubeconfig)}
        self.log_path = workdir / f"{name}.log"
        try:
            self.proc = ManagedProcess(name, self.argv, self.log_path, env=self.env)
        except BaseException:
            release_all(self.reserved_ports)
            raise

    def restart(self) -> None:
        """Start again with the same ports, as the kubelet restarts a container that exited (the old
        process is stopped first if it still runs)."""
        self.proc.stop()
        self.proc = ManagedProcess(self.name, self.argv, self.log_path, env=self.env)

    def retire(self) -> None:
        """Stop for good: the process, then its ports back to the pool."""
        self.proc.stop()
        release_all(self.reserved_ports)

    def ready(self) -> bool:
        self.proc.check_alive()
        conn = http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


class Installed:
    """What the module's set-up made: clients, the rendered Deployment, and the operator processes."""

    def __init__(
        self, cp: ControlPlane, kubectl: Kubectl, workdir: Path, deployment: JSON, extra_env: dict[str, str]
    ) -> None:
        self.cp = cp
        self.kubectl = kubectl
        self.workdir = workdir
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        self.args: list[str] = list(container["args"])
        # Names of shipped objects the Deployment hands the operator (after the install's name prefix).
        self.deployment_env: dict[str, str] = {
            var["name"]: var["value"]
            for var in container.get("env") or ()
            if var["name"] in DEPLOYMENT_ENV_PASSED and "value" in var
        }
        self.sa_kubeconfig = cp.service_account_kubeconfig(NS, SA)
        self.operators: list[OperatorProcess] = []
        self.webhook_port = 0
        self.extra_env = extra_env
        self.apiserver_restarts: list[tuple[dt.datetime, dt.datetime]] = []  # for callers that restart it

    def start_operator(self, name: str) -> OperatorProcess:
        env = {"DEVICEPLUGIN_NAMESPACE": NS, **self.deployment_env, **self.extra_env}
        op = OperatorProcess(name, self.args, env, self.sa_kubeconfig, self.workdir)
        self.operators.append(op)
        try:
            wait_for(f"operator {name} /readyz", op.ready, timeout=60)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; its log ends:\n{op.log()[-4000:]}") from None
        return op

    def running(self) -> list[OperatorProcess]:
        return [op for op in self.operators if op.proc.alive()]

    def restore_one_leader(self, timeout: float = 60.0) -> OperatorProcess:
        """Back to the state every test starts from: exactly one replica running, leading, and receiving
        the webhook calls. The Lease holder is kept if it runs (else the first running replica); every
        other replica is retired; with none left running, a new one is started.

        Why: a test that fails half-way leaves the replicas it started, or none; the next test would
        then fail on that state instead of on its own defect.
        """
        running = self.running()
        holder = self.leader()
        keep = next((op for op in running if op.name == holder), running[0] if running else None)
        for op in running:
            if op is not keep:
                op.retire()
        if keep is None:
            keep = self.start_operator(f"operator-{uuid.uuid4().hex[:6]}")
        if self.webhook_port != keep.webhook_port:
            self.route_webhooks_to(keep)
        survivor = keep
        wait_for(f"{survivor.name} to lead", lambda: self.leader() == survivor.name, timeout=timeout)
        return survivor

    def route_webhooks_to(self, op: OperatorProcess) -> None:
        """Point both webhook configurations' Service port at ``op``'s webhook server."""
        c = self.cp.client()
        try:
            for resource, name in WEBHOOK_CONFIGS.items():
                path = f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}"
                hooks = c.get(path)["webhooks"]
                ops = [
                    {
                        "op": "add",
                        "path": f"/webhooks/{i}/clientConfig/service/port",
                        "value": op.webhook_port,
                    }
                    for i in range(len(hooks))
                ]
                c.request("PATCH", path, ops, content_type="application/json-patch+json")
        finally:
            c.close()
        self.webhook_port = op.webhook_port

    def stop(self) -> dict[str, str]:
        """Stop every operator process and remove the install; returns each process's log."""
        for op in self.operators:
            op.retire()
        logs = {op.name: op.log() for op in self.operators}
        # Custom resources and their DaemonSets go with the CRDs; nothing of the install is left behind.
        self.kubectl("delete", "-k", str(overlay_dir()), "--ignore-not-found", "--wait=false", check=False)
        return logs

    def leader(self) -> str:
        c = self.cp.client()
        try:
            lease = c.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE_NAME}")
            return str(lease["spec"].get("holderIdentity") or "")
        finally:
            c.close()


def install(cp: ControlPlane, workdir: Path, extra_env: dict[str, str] | None = None) -> Installed:
    """Apply the overlay, reroute the webhook Service to loopback and start the first operator (leader)."""
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    overlay = overlay_dir()
    # An earlier install of the same session is removed without waiting; its namespace must be gone first.
    kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=180s", check=False, timeout=200)
    rendered = [d for d in yaml.safe_load_all(kubectl("kustomize", str(overlay)).stdout) if d]
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    kubectl("apply", "-k", str(overlay))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    # The Deployment's pod would only pretend to run on a kwok node: the operator runs locally instead.
    kubectl("scale", "-n", NS, "deployment", f"{PREFIX}controller-manager", "--replicas=0")
    kubectl("delete", "-n", NS, "service", SERVICE)
    kubectl(
        "create", "-n", NS, "service", "externalname", SERVICE, "--external-name=localhost", "--tcp=443:9443"
    )
    setup = Installed(cp, kubectl, workdir, deployment, extra_env or {})
    try:
        primary = setup.start_operator("operator-a")
        setup.route_webhooks_to(primary)
        wait_for("operator-a to lead", lambda: setup.leader() == "operator-a", timeout=30)
    except BaseException:
        setup.stop()
        raise
    return setup
