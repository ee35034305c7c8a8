"""A started node: its namespaces, containerd and kubelet, and what tests do with it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8stest.binaries import in_ci
from k8stest.controlplane import KUBERNETES_SERVICE_IP, SERVICE_CIDR, ControlPlane
from k8stest.kubeclient import JSON, ApiError, wait_for
from k8stest.node.binaries import NodeBinaries
from k8stest.node.certs import client_cert_kubeconfig, node_client_certificate
from k8stest.node.cgroups import cgroup_mounts, create_cgroups, kill_and_remove_cgroups
from k8stest.node.config import (
    CAP_SYS_RESOURCE,
    KUBELET_SYSCTLS,
    NodeConfig,
    NodeLayout,
    cni_configuration,
    containerd_configuration,
    has_capability,
    kubelet_configuration,
)
from k8stest.node.controlplane import egress_socket, proxy_credentials
from k8stest.node.trees import (
    SIM_DEVICE_MAJOR,
    Bind,
    build_dev,
    make_char_device,
    merge_sysfs,
    renumber_char_links,
    replace_with_char_device,
)
from k8stest.ociimage import PAUSE_IMAGE, busybox_images, localize_archive, localized_index, write_oci_archive
from k8stest.ports import ReservedPort, release_all, reserve_ports
from k8stest.process import ManagedProcess

CONTAINERD_NAMESPACE = "k8s.io"
# The directory holding the k8stest package: the node's own Python processes import from it.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RealNode:
    """A started node. Use :func:`start_real_node`; call :meth:`stop` when done."""

    name: str
    layout: NodeLayout
    binaries: NodeBinaries
    process: ManagedProcess
    hierarchies: list[Path]
    kubelet_port: int
    started_in: float = 0.0
    imported: list[str] = field(default_factory=list)
    # Whether this node's proxy carries the API server's "cluster" traffic (webhooks, logs, exec): only
    # the first node of a control plane does, so a pod the API server must reach runs there.
    serves_egress: bool = False
    # The kubelet's port and healthz port, held until stop().
    reserved_ports: list[ReservedPort] = field(default_factory=list)

    @property
    def workdir(self) -> Path:
        return self.layout.workdir

    @property
    def device_plugin_dir(self) -> Path:
        """Host path of the node's /var/lib/kubelet/device-plugins (kubelet.sock lives here)."""
        return self.layout.device_plugin_dir

    @property
    def plugins_registry_dir(self) -> Path:
        """Host path of the node's /var/lib/kubelet/plugins_registry (DRA registration sockets)."""
        return self.layout.plugins_registry_dir

    @property
    def plugins_dir(self) -> Path:
        """Host path of the node's /var/lib/kubelet/plugins (DRA service sockets, checkpoints)."""
        return self.layout.plugins_dir

    @property
    def dev_dir(self) -> Path:
        return self.layout.dev_dir

    @property
    def sys_dir(self) -> Path:
        return self.layout.sys_dir

    def ctr(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``ctr`` against the node's containerd (namespace k8s.io); return its stdout."""
        argv = [
            str(self.binaries.path("ctr")),
            f"--address={self.layout.containerd_socket}",
            f"--namespace={CONTAINERD_NAMESPACE}",
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def import_images(self, archive: Path) -> list[str]:
        """``ctr images import`` an OCI archive (unpacked for the CRI's snapshotter); returns the
        new image names. Unqualified names are imported as ``localhost/<name>``
        (:func:`k8stest.ociimage.qualified_reference` says why)."""
        with tarfile.open(archive) as tar:
            index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        if localized_index(index) != index:
            archive = localize_archive(archive, self.workdir / "images" / archive.name)
        before = set(self.image_names())
        self.ctr("images", "import", f"--snapshotter={self._snapshotter()}", str(archive))
        names = sorted(n for n in set(self.image_names()) - before if not n.startswith("sha256:"))
        self.imported.extend(names)
        return names

    def _snapshotter(self) -> str:
        text = (self.workdir / "containerd.toml").read_text()
        return text.split('snapshotter = "', 1)[1].split('"', 1)[0]

    def image_names(self) -> list[str]:
        return [line.split()[0] for line in self.ctr("images", "list").splitlines()[1:] if line.strip()]

    def add_device(self, relative: str, minor: int) -> Path:
        """A simulated device node at ``/dev/<relative>`` inside the node (hot-plug)."""
        return make_char_device(self.dev_dir / relative, minor)

    def realize_device_nodes(self) -> list[Path]:
        """Turn plain files under the node's /dev into character devices (major 60, unused minors).

        The simulator's builders (``sim.gpu.add_card`` on a ``FakeTree`` rooted at the work
        directory) write device nodes as plain files; runc needs real ones. Call after a hot-plug.
        """
        minors = {
            os.minor(p.stat().st_rdev)
            for p in self.dev_dir.rglob("*")
            if not p.is_symlink()
            and stat.S_ISCHR(p.lstat().st_mode)
            and os.major(p.lstat().st_rdev) == SIM_DEVICE_MAJOR
        }
        made = []
        staging = self.workdir / "dev-staging"
        for path in sorted(self.dev_dir.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            minor = max(minors, default=-1) + 1
            minors.add(minor)
            made.append(replace_with_char_device(path, minor, self.dev_dir / "char", staging))
        renumber_char_links(self.dev_dir / "char")
        return made

    def check_alive(self) -> None:
        self.process.check_alive()

    def kubelet_pid(self) -> int:
        try:
            return int((self.workdir / "kubelet.pid").read_text())
        except (OSError, ValueError):
            return 0

    def restart_kubelet(self, timeout: float = 60.0) -> int:
        """Stop the kubelet (SIGTERM) and start it again with the same flags; containerd and the
        containers keep running. Returns the new kubelet's pid once it runs."""
        old = self.kubelet_pid()
        os.kill(self.process.pid, signal.SIGHUP)

        def restarted() -> int | None:
            self.process.check_alive()
            pid = self.kubelet_pid()
            return pid if pid not in (0, old) else None

        return wait_for("the kubelet to restart", restarted, timeout=timeout)

    def log_tail(self, component: str, lines: int = 40) -> str:
        try:
            text = (self.layout.logs / f"{component}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the kubelet and containerd, kill every container, remove the cgroups."""
        self.process.stop(timeout=15)
        left = kill_and_remove_cgroups(self.layout.cgroup, self.hierarchies)
        release_all(self.reserved_ports)
        if left:
            raise RuntimeError(f"node {self.name}: cgroups still busy after stop: {', '.join(left[:5])}")


def _write_runtime_wrapper(path: Path, runc: str) -> None:
    """containerd's OCI runtime: :mod:`k8stest.node.runtime` for ``create``, runc for the rest.

    The module runs as a script: it needs only the standard library, and importing the package
    would add its imports to every container's start."""
    script = Path(__file__).resolve().with_name("runtime.py")
    path.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" create "*) exec "{sys.executable}" -I "{script}" "{runc}" "$@";; esac\n'
        f'exec "{runc}" "$@"\n'
    )
    path.chmod(0o755)


def _node_ready(node: JSON, own_taints: Sequence[Mapping[str, str]]) -> bool:
    """Ready, and free of the taints the node controller sets until then (``own_taints`` aside)."""
    conditions = node.get("status", {}).get("conditions", [])
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    own = {t["key"] for t in own_taints}
    blocking = [
        t
        for t in node.get("spec", {}).get("taints", [])
        if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") not in own
    ]
    return ready and not blocking


def start_real_node(
    bins: NodeBinaries,
    cp: ControlPlane,
    workdir: Path,
    config: NodeConfig | None = None,
    *,
    sim_root: Path | None = None,
    images: Sequence[Path] = (),
    pause_image: str = PAUSE_IMAGE,
) -> RealNode:
    """Prepare the node's trees, start it in its namespaces and wait until the Node is Ready.

    ``sim_root`` is a simulated node (``sim.node.build_node``'s root with ``sys/`` and ``dev/``);
    its devices appear at /sys and /dev inside the node, its ``etc/`` files in the node's /etc and
    its ``usr/local/bin`` (when it has one) as the node's /usr/local/bin. ``images`` are OCI
    archives imported before the kubelet starts; one of them must hold ``pause_image``, which
    containerd needs for the first pod (nothing is ever pulled).
    """
    cfg = config or NodeConfig()
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    layout = NodeLayout(workdir, f"/k8stest-{secrets.token_hex(4)}")
    etc_upper, etc_work = layout.etc_overlay_dir / "upper", layout.etc_overlay_dir / "work"
    # The kubelet makes its DRA plugin directories (plugins_registry, plugins) at start; made here
    # as well, so they exist on the host side before it runs and whatever its version does.
    for d in (layout.kubelet_dir, layout.device_plugin_dir, layout.plugins_registry_dir,
              layout.plugins_dir, layout.log_dir, layout.opt_dir, layout.logs, layout.sysctl_dir,
              workdir / "cni", workdir / "containerd-root", layout.cdi_run_dir, layout.cdi_etc_dir,
              etc_upper / "cdi", etc_work, layout.srv_dir):  # fmt: skip
        d.mkdir(parents=True, exist_ok=True)

    # /sys and /dev
    if sim_root is not None and (sim_root / "sys").is_dir():
        shutil.copytree(sim_root / "sys", layout.sys_dir, symlinks=True)
    sys_binds = merge_sysfs(layout.sys_dir, Path("/sys"))
    # Host software the simulation stands in for: its /etc files (e.g. QAT's <type>_dev<N>.conf) join the
    # node's /etc overlay, and its /usr/local/bin (QAT's adf_ctl) replaces the machine's inside the node.
    if sim_root is not None and (sim_root / "etc").is_dir():
        shutil.copytree(sim_root / "etc", etc_upper, symlinks=True, dirs_exist_ok=True)
    local_bin = sim_root / "usr" / "local" / "bin" if sim_root is not None else None
    extra_binds = (
        [Bind(str(local_bin), "/usr/local/bin")] if local_bin is not None and local_bin.is_dir() else []
    )
    dev_binds = build_dev(layout.dev_dir, sim_root / "dev" if sim_root is not None else None)

    # Identity, configuration files
    pki = cp.pki
    cert, key = node_client_certificate(pki.ca_pem, pki.ca_key.read_bytes(), cfg.name)
    cert_file, key_file = workdir / "kubelet-client.crt", workdir / "kubelet-client.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    key_file.chmod(0o600)
    kubeconfig = workdir / "kubelet.kubeconfig"
    # Inside the node the API server is the ``kubernetes`` Service (served by the node's proxy).
    in_node_server = f"https://{KUBERNETES_SERVICE_IP}:443"
    kubeconfig.write_text(
        client_cert_kubeconfig(in_node_server, pki.ca_cert, cert_file, key_file, f"system:node:{cfg.name}")
    )
    creds = proxy_credentials(cp)
    egress = egress_socket(cp)
    proxy_config = workdir / "proxy.json"
    proxy_config.write_text(
        json.dumps(
            {
                "credentials": {
                    "server": creds.server,
                    "ca_pem": creds.ca_pem.decode(),
                    "token": creds.token,
                    "user": creds.user,
                },
                "apiserver": {"ip": "127.0.0.1", "port": cp.ports.apiserver},
                "kubernetes_service": {"ip": KUBERNETES_SERVICE_IP, "port": 443},
                "egress_socket": str(egress or ""),
                "ready_file": str(layout.proxy_ready),
            },
            indent=1,
        )
    )
    proxy_config.chmod(0o600)
    reserved = reserve_ports(2)
    kubelet_port, healthz_port = (r.port for r in reserved)
    (workdir / "kubelet.yaml").write_text(
        json.dumps(
            kubelet_configuration(
                cfg, layout, ca_file=pki.ca_cert, port=kubelet_port, healthz_port=healthz_port
            ),
            indent=1,
        )
    )
    (workdir / "containerd.toml").write_text(
        containerd_configuration(
            cfg,
            layout,
            cni_bin_dir=bins.cni_dir,
            pause_image=pause_image,
            can_lower_oom_score=has_capability(Path("/proc/self/status").read_text(), CAP_SYS_RESOURCE),
        )
    )
    (workdir / "cni" / "10-k8stest.conflist").write_text(json.dumps(cni_configuration(cfg), indent=1))
    (workdir / "resolv.conf").write_text("options ndots:1\n")
    _write_runtime_wrapper(workdir / "runtime", cfg.runtime_binary or str(bins.path("runc").resolve()))
    for name, value in KUBELET_SYSCTLS.items():
        (layout.sysctl_dir / name.replace("/", ".")).write_text(value + "\n")

    hierarchies = cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    create_cgroups(layout.cgroup, hierarchies)

    labels = ",".join(f"{k}={v}" for k, v in sorted(cfg.labels.items()))
    plan = {
        "cgroup": layout.cgroup,
        "hierarchies": [str(h) for h in hierarchies],
        "mounts": [
            {"kind": "tmpfs", "target": "/run"},
            {"kind": "mkdir", "target": "/run/cdi"},
            {"kind": "bind", "source": str(layout.cdi_run_dir), "target": "/run/cdi"},
            # /etc stays the machine's, seen through an overlay that adds an empty cdi/ directory
            {
                "kind": "overlay",
                "lower": "/etc",
                "upper": str(etc_upper),
                "work": str(etc_work),
                "target": "/etc",
            },
            {"kind": "bind", "source": str(layout.cdi_etc_dir), "target": "/etc/cdi"},
            {"kind": "tmpfs", "target": "/var/lib"},
            {"kind": "bind", "source": str(layout.opt_dir), "target": "/opt"},
            {"kind": "bind", "source": str(layout.srv_dir), "target": "/srv"},
            *({"kind": "bind", "source": b.source, "target": b.target} for b in extra_binds),
            {"kind": "mkdir", "target": "/var/lib/kubelet"},
            {"kind": "bind", "source": str(layout.kubelet_dir), "target": "/var/lib/kubelet"},
            {"kind": "bind", "source": str(layout.log_dir), "target": "/var/log"},
            *({"kind": "bind", "source": b.source, "target": b.target} for b in sys_binds),
            {"kind": "bind", "source": str(layout.sys_dir), "target": "/sys"},
            *({"kind": "bind", "source": b.source, "target": b.target} for b in dev_binds),
            {"kind": "bind", "source": str(layout.dev_dir), "target": "/dev"},
            *(
                {
                    "kind": "bind",
                    "source": str(layout.sysctl_dir / n.replace("/", ".")),
                    "target": f"/proc/sys/{n}",
                }
                for n in KUBELET_SYSCTLS
            ),
        ],
        "network": {"node_ip": cfg.node_ip, "service_cidr": SERVICE_CIDR},
        "proxy": {
            "argv": [sys.executable, "-m", "k8stest.nodeproxy", str(proxy_config)],
            "log": str(layout.logs / "proxy.log"),
            "ready_file": str(layout.proxy_ready),
        },
        "containerd": {
            "argv": [str(bins.path("containerd")), f"--config={workdir / 'containerd.toml'}"],
            "socket": str(layout.containerd_socket),
            "log": str(layout.logs / "containerd.log"),
            "path_prepend": str(bins.directory),
        },
        "kubelet": {
            "argv": [
                str(bins.path("kubelet")),
                f"--config={workdir / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={cfg.name}",
                f"--node-ip={cfg.node_ip}",
                *([f"--node-labels={labels}"] if labels else []),
                "--v=2",
            ],
            "log": str(layout.logs / "kubelet.log"),
        },
        "ready_file": str(workdir / "containerd.ready"),
    }
    plan_file = workdir / "node-plan.json"
    plan_file.write_text(json.dumps(plan, indent=1))

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    try:
        process = ManagedProcess(
            "node",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                sys.executable,
                "-m",
                "k8stest.nodeinit",
                str(plan_file),
            ],
            layout.logs / "node.log",
            env=env,
        )
    except BaseException:
        kill_and_remove_cgroups(layout.cgroup, hierarchies)
        release_all(reserved)
        raise
    node = RealNode(
        cfg.name,
        layout,
        bins,
        process,
        hierarchies,
        kubelet_port,
        serves_egress=egress is not None,
        reserved_ports=reserved,
    )
    try:
        ready_file = Path(str(plan["ready_file"]))

        def containerd_serving() -> bool:
            process.check_alive()
            return ready_file.exists()

        wait_for("containerd to serve", containerd_serving, timeout=30)
        for archive in images:
            node.import_images(archive)
        if pause_image not in node.image_names():
            raise RuntimeError(
                f"node {cfg.name}: the sandbox image {pause_image} is in none of {list(images)}"
            )
        (workdir / "kubelet.go").touch()  # nodeinit starts the kubelet once this file exists

        client = cp.client()
        try:

            def ready() -> bool:
                process.check_alive()
                try:
                    return _node_ready(client.get(f"/api/v1/nodes/{cfg.name}"), cfg.taints)
                except ApiError as e:
                    if e.status == 404:
                        return False
                    raise

            wait_for(
                f"node {cfg.name} Ready (kubelet log: {layout.logs / 'kubelet.log'})",
                ready,
                timeout=cfg.start_timeout,
            )
        finally:
            client.close()
    except BaseException:
        with contextlib.suppress(Exception):
            node.stop()
        raise
    node.started_in = time.monotonic() - t0
    return node


@contextlib.contextmanager
def running_real_node(
    bins: NodeBinaries, cp: ControlPlane, workdir: Path, config: NodeConfig | None = None, **kwargs: Any
) -> Iterator[RealNode]:
    node = start_real_node(bins, cp, workdir, config, **kwargs)
    try:
        yield node
    finally:
        node.stop()


def ci_policy_reason(reason: str) -> str:
    """The message a fixture reports; under CI it fails the run instead of skipping."""
    return f"CI=true and {reason}" if in_ci() else reason


def write_test_images(bins: NodeBinaries, out: Path) -> Path:
    """The workload and sandbox images (busybox from the node binaries) as one OCI archive."""
    return write_oci_archive(busybox_images(bins.path("busybox").resolve()), out)
