"""The kind-neutral assembly of a plugin DaemonSet from the kind's profile (docs/operator.md, "What the
operator deploys"); each kind's own parts are in its module under ``operator/kinds/``.

``desired_daemonset`` returns the complete object the operator applies with server-side apply; because every
field the operator cares about is in it, reapplying changes nothing and hand edits are undone.
Deliberate differences from upstream (tests/operator/data/upstream_sample_daemonsets.yaml lists them for
upstream's samples): the container runs the plugin console script explicitly; memory requests and limits fit
a Python process; the DSA ``vfio-pci`` device mount uses ``/dev/vfio`` on both sides; an FPGA CR without
``initImage`` gets the default FPGA init image; the QAT PF ID list skips drivers without PF IDs instead of
leaving empty words; GPU and NPU pods get no ServiceAccount token; the sysfs-writing init containers (DLB,
DSA, IAA, QAT) are not privileged and mount only the sysfs subtrees they write; every init container drops
all capabilities and uses the runtime's default seccomp profile.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from intel_device_plugins.operator import images
from intel_device_plugins.operator.kinds import API_VERSION, DeviceKind
from intel_device_plugins.operator.pod import (
    CDI_DIR,
    DEFAULT_NODE_SELECTOR,
    DRA_HEALTHCHECK_PORT,
    DRA_MOUNTS,
    DRA_PLUGINS_DIR,
    DRA_REGISTRAR_DIR,
    JSON,
    PLUGIN_SELINUX,
    HostMount,
    node_name_env,
    pod_uid_env,
)
from intel_device_plugins.operator.profile import DraTemplate, InitParts
from intel_device_plugins.operator.registry import AnySpec, profile_of
from intel_device_plugins.plugins import flagnames

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "intel-deviceplugin-operator"


def plugin_args(spec: AnySpec) -> list[str]:
    """Command-line arguments of the plugin container: the common ``-v``, then the kind's own."""
    return ["-v", str(spec.log_level), *profile_of(spec).plugin_args(spec)]


def _pod_volumes(spec: AnySpec, init_volumes: list[JSON]) -> list[JSON]:
    """The plugin's volumes, then the init containers', then the kind's late ones."""
    profile = profile_of(spec)
    main = [m.volume() for m in profile.mounts(spec)]
    late = [v for v in main if v["name"] in profile.late_volumes]
    return [v for v in main if v["name"] not in profile.late_volumes] + init_volumes + late


def plugin_container(spec: AnySpec) -> JSON:
    """The single plugin container."""
    kind = spec.KIND
    profile = profile_of(spec)
    tmpl = profile.template
    sc: JSON = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if tmpl.selinux:
        sc["seLinuxOptions"] = {"type": PLUGIN_SELINUX}
    env: list[JSON] = []
    if tmpl.node_name_env:
        env.append(node_name_env())
    if tmpl.host_ip_env:
        env.append({"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    container: JSON = {
        "name": kind.daemonset_base,
        "image": spec.image or images.default_plugin_image(kind),
        "imagePullPolicy": "IfNotPresent",
        "command": [images.plugin_command(kind)],
        "args": plugin_args(spec),
        "securityContext": sc,
        "resources": {
            "requests": {"memory": tmpl.requests[0], "cpu": tmpl.requests[1]},
            "limits": {"memory": tmpl.limits[0], "cpu": tmpl.limits[1]},
        },
        "volumeMounts": [m.mount() for m in profile.mounts(spec)],
    }
    if env:
        container["env"] = env
    if tmpl.termination_log:
        container["terminationMessagePath"] = "/tmp/termination-log"
    return container


def _dra(spec: AnySpec) -> DraTemplate[AnySpec]:
    dra = profile_of(spec).dra
    if dra is None:
        raise ValueError(f"{spec.KIND.kind} has no DRA driver")
    return dra


def dra_shared_args(log_level: int) -> list[str]:
    """The flags every DRA driver gets: ``-v`` and the host directories the pod mounts (the node name comes
    from ``NODE_NAME``)."""
    return [
        "-v",
        str(log_level),
        flagnames.flag(flagnames.DRA_CDI_ROOT),
        CDI_DIR,
        flagnames.flag(flagnames.DRA_REGISTRAR_DIR),
        DRA_REGISTRAR_DIR,
        flagnames.flag(flagnames.DRA_PLUGINS_DIR),
        DRA_PLUGINS_DIR,
        flagnames.flag(flagnames.DRA_HEALTHCHECK_PORT),
        str(DRA_HEALTHCHECK_PORT),
    ]


def dra_probes(port: int = DRA_HEALTHCHECK_PORT) -> JSON:
    """The driver container's port and its startup and liveness probes: the kubelet's own grpc probe of
    the driver's ``grpc.health.v1`` service (``liveness``), which is serving while the driver answers on
    its kubelet sockets. Startup allows ten minutes (a first scan, a slow API server); then three missed
    checks 30 s apart restart the pod. Intel's DRA drivers probe the same way."""
    probe = {"grpc": {"port": port, "service": "liveness"}, "timeoutSeconds": 10}
    return {
        "ports": [{"name": "healthcheck", "containerPort": port}],
        "startupProbe": {**probe, "failureThreshold": 60, "periodSeconds": 10},
        "livenessProbe": {**probe, "failureThreshold": 3, "periodSeconds": 30},
    }


def dra_kind_args(spec: AnySpec) -> list[str]:
    """The kind's own driver flags (QAT's devices and drivers, FPGA's mode, ...)."""
    return _dra(spec).args(spec)


def dra_args(spec: AnySpec) -> list[str]:
    """The DRA driver's arguments: the shared flags, then the kind's."""
    return dra_shared_args(spec.log_level) + dra_kind_args(spec)


def dra_mounts(spec: AnySpec) -> tuple[HostMount, ...]:
    """The driver container's host mounts: the shared ones, then what the kind writes besides."""
    return DRA_MOUNTS + _dra(spec).mounts(spec)


def dra_container(spec: AnySpec) -> JSON:
    """The DRA driver container: root without any capability, read-only root file system; it writes only
    to the hostPath directories of ``DRA_MOUNTS``."""
    kind = spec.KIND
    dra = _dra(spec)
    return {
        "name": kind.dra_driver_base,
        "image": spec.image or images.default_plugin_image(kind),
        "imagePullPolicy": "IfNotPresent",
        "command": [images.dra_driver_command(kind)],
        "args": dra_args(spec),
        **dra_probes(),
        "env": [node_name_env(), pod_uid_env()],
        # The host's /dev is mounted read-only over the container's: the kubelet's default
        # /dev/termination-log could not be created there and the container would never start.
        "terminationMessagePath": "/tmp/termination-log",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {
            "requests": {"memory": dra.requests[0], "cpu": dra.requests[1]},
            "limits": {"memory": dra.limits[0], "cpu": dra.limits[1]},
        },
        "volumeMounts": [m.mount() for m in dra_mounts(spec)],
    }


def _init_without_clashes(init_parts: InitParts, taken: set[str]) -> InitParts:
    """The init containers and their volumes, each volume whose name the driver's own volumes already use
    renamed ``init-<name>`` (QAT's init container calls its /sys/devices volume ``sysfs``, as the driver
    calls /sys)."""
    containers, volumes = init_parts
    fixed = {v["name"]: f"init-{v['name']}" for v in volumes if v["name"] in taken}
    if not fixed:
        return init_parts
    return (
        [
            {**c, "volumeMounts": [{**m, "name": fixed.get(m["name"], m["name"])} for m in c["volumeMounts"]]}
            for c in containers
        ],
        [{**v, "name": fixed.get(v["name"], v["name"])} for v in volumes],
    )


def dra_pod(spec: AnySpec, service_account: str, init_parts: InitParts) -> JSON:
    """The DRA driver's pod spec: it calls the API server, so it runs under ``service_account`` (its RBAC
    and the ResourceSlice admission policy name it) with the pod-bound token that names its node."""
    own = [m.volume() for m in dra_mounts(spec)]
    init_containers, init_volumes = _init_without_clashes(init_parts, {v["name"] for v in own})
    pod: JSON = {
        "nodeSelector": node_selector(spec),
        "automountServiceAccountToken": True,
        "containers": [dra_container(spec)],
        "volumes": own + init_volumes,
    }
    if service_account:
        pod["serviceAccountName"] = service_account
        # The deprecated alias too: the API server copies it back into serviceAccountName when that alone
        # is dropped, so switching the CR back to the plugin would keep the driver's identity.
        pod["serviceAccount"] = service_account
    if init_containers:
        pod["initContainers"] = init_containers
    return pod


@dataclasses.dataclass(frozen=True)
class Owner:
    """The CR that controls the DaemonSet."""

    kind: DeviceKind
    name: str
    uid: str

    def reference(self) -> JSON:
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def node_selector(spec: AnySpec) -> dict[str, str]:
    """The CR's node selector, or the default; plus any labels the kind always selects on."""
    selector = dict(spec.node_selector) if spec.node_selector else dict(DEFAULT_NODE_SELECTOR)
    selector.update(profile_of(spec).forced_node_selector)
    return selector


def desired_daemonset(
    spec: AnySpec,
    owner: Owner,
    namespace: str,
    pull_secret: str = "",
    fpga_service_account: str = "",
    dra_service_account: str = "",
) -> JSON:
    """Complete DaemonSet for ``spec`` (already carrying its effective images) owned by ``owner``.

    ``fpga_service_account`` names the ServiceAccount of FPGA plugin pods: the plugin reads its node's
    mode annotation, which the namespace's default ServiceAccount may not. Empty keeps the default one.
    ``dra_service_account`` names the ServiceAccount of DRA driver pods (``deployAs: DRADriver``).

    A DRA driver DaemonSet keeps the plugin's name and labels, so switching ``deployAs`` rolls the same
    DaemonSet over from one to the other; it surges (a new pod starts before the old one stops) because
    two driver instances may serve a node side by side, while two device plugins may not.
    """
    kind = spec.KIND
    profile = profile_of(spec)
    tmpl = profile.template
    app = {"app": kind.daemonset_base}
    dra = profile.deploys_dra(spec)
    pod: JSON
    if dra:
        pod = dra_pod(spec, dra_service_account, profile.init_parts(spec))
    else:
        init_containers, init_volumes = profile.init_parts(spec)
        pod = {
            "nodeSelector": node_selector(spec),
            "containers": [plugin_container(spec)],
            "volumes": _pod_volumes(spec, init_volumes),
        }
        if tmpl.automount_token is not None:
            pod["automountServiceAccountToken"] = tmpl.automount_token
        if profile.plugin_service_account and fpga_service_account:
            pod["serviceAccountName"] = fpga_service_account
        if init_containers:
            pod["initContainers"] = init_containers
    if spec.tolerations is not None:
        pod["tolerations"] = [t.to_dict() for t in spec.tolerations]
    if pull_secret:
        pod["imagePullSecrets"] = [{"name": pull_secret}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": kind.daemonset_name(owner.name),
            "namespace": namespace,
            "labels": {**app, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "selector": {"matchLabels": dict(app)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}
                if dra
                else {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {"metadata": {"labels": dict(app)}, "spec": pod},
        },
    }
