"""A real Kubernetes node for the integration tier: kubelet + containerd + runc + bridge CNI.

Why a real node: kwok nodes never run a container, so only a kubelet that starts pods shows that
what the operator writes (host paths, security contexts, the socket directory, device requests)
works. The node joins the control plane of :mod:`k8stest.controlplane` and is isolated from the
machine it runs on:

- Its processes run in a private mount namespace (``unshare --mount``). There, ``/sys`` and
  ``/dev`` are work-directory trees that merge a simulated node (``sim/``) with the host parts the
  kubelet needs (cgroups, CPU topology), ``/var/lib`` and ``/run`` are fresh tmpfs instances,
  ``/var/lib/kubelet``, ``/var/log``, ``/opt`` and ``/srv`` are work-directory bind mounts, and the
  six ``/proc/sys`` values the kubelet would otherwise set are files holding the values it wants.
- The kubelet, containerd and every pod share a network namespace of the node's own; the CNI bridge
  lives there. :mod:`k8stest.nodeproxy` joins it to the control plane on the machine's loopback:
  it serves the Services' ClusterIPs inside the node (the ``kubernetes`` Service leads to the API
  server) and carries the API server's own calls into the node (webhooks, logs) through the API
  server's egress selector (:func:`start_node_control_plane`).
- All node processes and containers live below one cgroup (``/k8stest-<id>`` in every v1
  hierarchy), which is how :meth:`RealNode.stop` finds and kills every one of them.

The kubelet authenticates with a client certificate for ``system:node:<name>`` signed by the
control plane's CA, so the Node authorizer applies to it as to any real kubelet.

The package, by part: :mod:`.binaries`, :mod:`.config` (pure), :mod:`.controlplane`, :mod:`.trees`,
:mod:`.certs`, :mod:`.cgroups`, :mod:`.running`, :mod:`.pods`; :mod:`.runtime` is the node's OCI
runtime wrapper; :mod:`.plugins`, :mod:`.operator`, :mod:`.dra`, :mod:`.dradriver` and
:mod:`.fixtures` serve tests; :mod:`.cli` is ``python -m k8stest node``.
"""

from __future__ import annotations

from k8stest.node.binaries import (
    CNI_PLUGINS,
    NODE_BIN_DIR_ENV,
    NODE_REQUIRED,
    NodeBinaries,
    find_node_binaries,
    node_unavailable_reason,
)
from k8stest.node.certs import client_cert_kubeconfig, node_client_certificate
from k8stest.node.cgroups import cgroup_mounts, create_cgroups, kill_and_remove_cgroups
from k8stest.node.config import (
    CAP_SYS_RESOURCE,
    EGRESS_SOCKET_NAME,
    KUBELET_SYSCTLS,
    NodeConfig,
    NodeLayout,
    cni_configuration,
    containerd_configuration,
    egress_selector_configuration,
    has_capability,
    kubelet_configuration,
)
from k8stest.node.controlplane import egress_socket, proxy_credentials, start_node_control_plane
from k8stest.node.pods import pod_log, workload_pod
from k8stest.node.running import (
    CONTAINERD_NAMESPACE,
    RealNode,
    ci_policy_reason,
    running_real_node,
    start_real_node,
    write_test_images,
)
from k8stest.node.trees import (
    DEV_SYMLINKS,
    HOST_DEV_MOUNTS,
    HOST_OWNED_SYSFS,
    SIM_DEVICE_MAJOR,
    SIMULATED_SYSFS,
    STANDARD_DEVICES,
    Bind,
    build_dev,
    make_char_device,
    merge_sysfs,
    renumber_char_links,
)

__all__ = [
    "CAP_SYS_RESOURCE",
    "CNI_PLUGINS",
    "CONTAINERD_NAMESPACE",
    "DEV_SYMLINKS",
    "EGRESS_SOCKET_NAME",
    "HOST_DEV_MOUNTS",
    "HOST_OWNED_SYSFS",
    "KUBELET_SYSCTLS",
    "NODE_BIN_DIR_ENV",
    "NODE_REQUIRED",
    "SIMULATED_SYSFS",
    "SIM_DEVICE_MAJOR",
    "STANDARD_DEVICES",
    "Bind",
    "NodeBinaries",
    "NodeConfig",
    "NodeLayout",
    "RealNode",
    "build_dev",
    "cgroup_mounts",
    "ci_policy_reason",
    "client_cert_kubeconfig",
    "cni_configuration",
    "containerd_configuration",
    "create_cgroups",
    "egress_selector_configuration",
    "egress_socket",
    "find_node_binaries",
    "has_capability",
    "kill_and_remove_cgroups",
    "kubelet_configuration",
    "make_char_device",
    "merge_sysfs",
    "node_client_certificate",
    "node_unavailable_reason",
    "pod_log",
    "proxy_credentials",
    "renumber_char_links",
    "running_real_node",
    "start_node_control_plane",
    "start_real_node",
    "workload_pod",
    "write_test_images",
]
