"""The control plane a real node joins: egress into the node, and the node proxy's identity."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

from k8stest.binaries import Binaries
from k8stest.controlplane import ControlPlane, ControlPlaneConfig, start_control_plane
from k8stest.kubeclient import Credentials
from k8stest.node.config import EGRESS_SOCKET_NAME, egress_selector_configuration


def start_node_control_plane(
    bins: Binaries, workdir: Path, config: ControlPlaneConfig | None = None
) -> ControlPlane:
    """A control plane for one real node: no kwok, and "cluster" egress through the node's proxy.

    Why a control plane of its own: its API server sends every call into the cluster (webhooks
    included) through the node, which only works for a cluster made of that node.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    egress = workdir / "egress-selector.json"
    egress.write_text(json.dumps(egress_selector_configuration(workdir / EGRESS_SOCKET_NAME), indent=1))
    cfg = config or ControlPlaneConfig()
    return start_control_plane(
        bins,
        workdir,
        dataclasses.replace(
            cfg,
            with_kwok=False,
            extra_apiserver_flags=(
                *cfg.extra_apiserver_flags,
                f"--egress-selector-config-file={egress}",
                # The kubelet by its address, as kubeadm configures it: there is no DNS for node names.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ),
        ),
    )


def egress_socket(cp: ControlPlane) -> Path | None:
    """Where this node's proxy should take the API server's "cluster" traffic; None when the
    control plane has no egress selector or another node of it serves the socket already."""
    path = cp.workdir / EGRESS_SOCKET_NAME
    if not (cp.workdir / "egress-selector.json").exists():
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return path
    return None


def proxy_credentials(cp: ControlPlane) -> Credentials:
    """A token for the node's service proxy: ServiceAccount ``kube-system/kube-proxy`` bound to
    ``system:node-proxier``, the identity and role a kube-proxy gets on a kubeadm cluster."""
    creds = cp.service_account_credentials("kube-system", "kube-proxy", expiration_seconds=86400)
    c = cp.client()
    try:
        c.apply_ok(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "k8stest:node-proxier"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:node-proxier",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}],
            },
        )
    finally:
        c.close()
    return creds
