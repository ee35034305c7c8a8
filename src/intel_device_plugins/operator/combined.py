"""Pure builder of the one-process-per-node DaemonSet (``--combined-plugin-process``).

Instead of one DaemonSet per CR, every enabled kind runs in one ``intel_device_plugins`` process per node,
each kind with the flags its CR asks for. The pod is the union of the per-kind pods: each kind's volumes
(renamed ``<kind>-<name>`` so equal names of different kinds never clash), one mount per container path,
every kind's init containers, and node affinity that selects a node when any CR's node selector matches it.
Every kind therefore runs on every selected node; a kind without devices there advertises nothing.

Only one CR per kind can be served by one process: when several CRs of a kind exist, the one whose name sorts
first is served and the others are reported as not served.

CRs that say ``deployAs: DRADriver`` run likewise in one ``intel_dra_drivers`` process per node (one
registration per driver name), in a DaemonSet of its own (``intel-dra-drivers``): a device plugin process and
a DRA driver process have different rights, mounts and update strategies.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, Final

from intel_device_plugins.operator.daemonset import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    Owner,
    desired_daemonset,
    dra_kind_args,
    dra_probes,
    dra_shared_args,
    node_selector,
    plugin_args,
)
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import AnySpec
from intel_device_plugins.operator.pod import PLUGIN_SELINUX
from intel_device_plugins.operator.registry import PROFILES

JSON = dict[str, Any]

COMBINED_NAME: Final = "intel-device-plugins"
COMBINED_COMMAND: Final = "intel_device_plugins"
COMBINED_MEMORY_REQUEST: Final = "64Mi"
COMBINED_MEMORY_LIMIT: Final = "128Mi"
"""One process serving seven kinds measured 38.9 MiB RSS on the simulated node (docs/performance.md); the
limit leaves more than the single-kind plugin's twice-the-peak headroom, for larger nodes."""

COMBINED_DRA_NAME: Final = "intel-dra-drivers"
COMBINED_DRA_COMMAND: Final = "intel_dra_drivers"
COMBINED_DRA_MEMORY_REQUEST: Final = "96Mi"
COMBINED_DRA_MEMORY_LIMIT: Final = "192Mi"
"""One driver's figures (``pod.DRA_REQUESTS``) with room for the other kinds' inventories; not yet measured
with every kind in one process."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One CR served by the combined process: its (effective) spec and its identity."""

    spec: AnySpec
    owner: Owner


def served_members(candidates: Sequence[Member]) -> tuple[list[Member], list[tuple[Member, Member]]]:
    """Members served, one per kind (first CR name in sort order); each other CR with the one served."""
    served: dict[DeviceKind, Member] = {}
    for member in sorted(candidates, key=lambda m: (list(DeviceKind).index(m.owner.kind), m.owner.name)):
        served.setdefault(member.owner.kind, member)
    skipped = [(m, served[m.owner.kind]) for m in candidates if served[m.owner.kind] is not m]
    return list(served.values()), skipped


def _millis(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


def _rename(pod: JSON, prefix: str) -> JSON:
    """Prefix every volume name of a pod spec, in its volumes and in every container's mounts."""
    names = {v["name"] for v in pod.get("volumes") or ()}
    fixed = {n: f"{prefix}-{n}" for n in names}
    out = dict(pod)
    out["volumes"] = [{**v, "name": fixed[v["name"]]} for v in pod.get("volumes") or ()]
    for key in ("containers", "initContainers"):
        if key in pod:
            out[key] = [
                {
                    **c,
                    "volumeMounts": [
                        {**m, "name": fixed.get(m["name"], m["name"])} for m in c.get("volumeMounts") or ()
                    ],
                }
                for c in pod[key]
            ]
    return out


def _affinity(selectors: Sequence[Mapping[str, str]]) -> JSON:
    """Required node affinity matching a node when any selector matches it (terms are ORed)."""
    terms = []
    for selector in selectors:
        term = {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]} for key, value in sorted(selector.items())
            ]
        }
        if term not in terms:
            terms.append(term)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def combined_args(specs: Sequence[AnySpec]) -> list[str]:
    """``intel_device_plugins`` arguments: the common ``-v`` once, then ``--plugin '<kind> <flags>'`` each."""
    level = max((s.log_level for s in specs), default=0)
    args = ["-v", str(level)]
    for spec in specs:
        own = plugin_args(spec)[2:]  # without the common "-v L"
        args += ["--plugin", shlex.join([spec.KIND.value, *own])]
    return args


def combined_dra_args(specs: Sequence[AnySpec]) -> list[str]:
    """``intel_dra_drivers`` arguments: the shared DRA flags once, then ``--driver '<kind> <flags>'`` each."""
    args = dra_shared_args(max((s.log_level for s in specs), default=0))
    for spec in specs:
        args += ["--driver", shlex.join([spec.KIND.value, *dra_kind_args(spec)])]
    return args


@dataclasses.dataclass(frozen=True)
class _Merged:
    """The union of the members' single-kind pods."""

    mounts: list[JSON]
    volumes: list[JSON]
    init_containers: list[JSON]
    env: list[JSON]
    cpu: tuple[str, str]  # request, limit: the sums of the kinds'
    tolerations: list[JSON]
    service_account: str


def _merge(pods: Sequence[JSON]) -> _Merged:
    """One mount per container path (writable if any kind needs it writable), every kind's init containers,
    the first of each environment variable, summed CPU and the union of the tolerations."""
    mounts: dict[str, JSON] = {}
    volumes: dict[str, JSON] = {}
    init_containers: list[JSON] = []
    env: dict[str, JSON] = {}
    cpu_request = cpu_limit = 0
    tolerations: list[JSON] = []
    service_account = ""
    for pod in pods:
        (single,) = pod["containers"]
        by_name = {v["name"]: v for v in pod["volumes"]}
        for mount in single["volumeMounts"]:
            path = mount["mountPath"]
            if path in mounts:
                if not mount.get("readOnly"):
                    mounts[path].pop("readOnly", None)
                continue
            mounts[path] = dict(mount)
            volumes[mount["name"]] = by_name[mount["name"]]
        for init in pod.get("initContainers") or ():
            init_containers.append(init)
            for mount in init["volumeMounts"]:
                volumes.setdefault(mount["name"], by_name[mount["name"]])
        for var in single.get("env") or ():
            env.setdefault(var["name"], var)
        cpu_request += _millis(single["resources"]["requests"]["cpu"])
        cpu_limit += _millis(single["resources"]["limits"]["cpu"])
        for toleration in pod.get("tolerations") or ():
            if toleration not in tolerations:
                tolerations.append(toleration)
        service_account = pod.get("serviceAccountName", service_account)
    return _Merged(
        list(mounts.values()),
        list(volumes.values()),
        init_containers,
        list(env.values()),
        (f"{cpu_request}m", f"{cpu_limit}m"),
        tolerations,
        service_account,
    )


def _combined_object(
    name: str, members: Sequence[Member], namespace: str, pod_spec: JSON, surge: bool
) -> JSON:
    app = {"app": name}
    owners = [{**m.owner.reference(), "controller": False, "blockOwnerDeletion": False} for m in members]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**app, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "ownerReferences": owners,
        },
        "spec": {
            "selector": {"matchLabels": dict(app)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}
                if surge
                else {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {"metadata": {"labels": dict(app)}, "spec": pod_spec},
        },
    }


def combined_dra_daemonset(
    members: Sequence[Member], namespace: str, pull_secret: str = "", dra_service_account: str = ""
) -> JSON:
    """The one DaemonSet that runs every member's DRA driver in one ``intel_dra_drivers`` process per node,
    under the DRA drivers' ServiceAccount, surging in a rolling update as a single driver does."""
    if not members:
        raise ValueError("the combined DRA DaemonSet needs at least one device kind")
    pods = [
        _rename(
            desired_daemonset(
                m.spec, m.owner, namespace, pull_secret, dra_service_account=dra_service_account
            )["spec"]["template"]["spec"],
            m.spec.KIND.value,
        )
        for m in members
    ]
    merged = _merge(pods)
    first = pods[0]["containers"][0]
    container: JSON = {
        "name": COMBINED_DRA_NAME,
        "image": first["image"],
        "imagePullPolicy": "IfNotPresent",
        "command": [COMBINED_DRA_COMMAND],
        "args": combined_dra_args([m.spec for m in members]),
        **dra_probes(),
        "env": merged.env,
        "securityContext": first["securityContext"],
        "resources": {
            "requests": {"memory": COMBINED_DRA_MEMORY_REQUEST, "cpu": merged.cpu[0]},
            "limits": {"memory": COMBINED_DRA_MEMORY_LIMIT, "cpu": merged.cpu[1]},
        },
        "volumeMounts": merged.mounts,
    }
    pod_spec: JSON = {
        "affinity": _affinity([node_selector(m.spec) for m in members]),
        "automountServiceAccountToken": True,
        "containers": [container],
        "volumes": merged.volumes,
    }
    if merged.service_account:
        pod_spec["serviceAccountName"] = pod_spec["serviceAccount"] = merged.service_account
    if merged.init_containers:
        pod_spec["initContainers"] = merged.init_containers
    if merged.tolerations:
        pod_spec["tolerations"] = merged.tolerations
    if pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": pull_secret}]
    return _combined_object(COMBINED_DRA_NAME, members, namespace, pod_spec, surge=True)


def combined_daemonset(
    members: Sequence[Member], namespace: str, pull_secret: str = "", fpga_service_account: str = ""
) -> JSON:
    """The one DaemonSet that runs every member's kind in one process per node.

    It runs under the FPGA plugin's ServiceAccount when FPGA is a member (the only kind that needs one).
    """
    if not members:
        raise ValueError("the combined DaemonSet needs at least one device kind")
    pods = [
        _rename(
            desired_daemonset(m.spec, m.owner, namespace, pull_secret, fpga_service_account)["spec"][
                "template"
            ]["spec"],
            m.spec.KIND.value,
        )
        for m in members
    ]
    merged = _merge(pods)
    kinds = [m.spec.KIND for m in members]
    sc: JSON = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if any(PROFILES[k].template.selinux for k in kinds):
        sc["seLinuxOptions"] = {"type": PLUGIN_SELINUX}
    container: JSON = {
        "name": COMBINED_NAME,
        "image": pods[0]["containers"][0]["image"],
        "imagePullPolicy": "IfNotPresent",
        "command": [COMBINED_COMMAND],
        "args": combined_args([m.spec for m in members]),
        "securityContext": sc,
        "resources": {
            "requests": {"memory": COMBINED_MEMORY_REQUEST, "cpu": merged.cpu[0]},
            "limits": {"memory": COMBINED_MEMORY_LIMIT, "cpu": merged.cpu[1]},
        },
        "volumeMounts": merged.mounts,
    }
    if merged.env:
        container["env"] = merged.env
    if any(PROFILES[k].template.termination_log for k in kinds):
        container["terminationMessagePath"] = "/tmp/termination-log"
    pod_spec: JSON = {
        "affinity": _affinity([node_selector(m.spec) for m in members]),
        "containers": [container],
        "volumes": merged.volumes,
    }
    automount = [PROFILES[k].template.automount_token for k in kinds]
    if all(a is False for a in automount):
        pod_spec["automountServiceAccountToken"] = False
    if merged.service_account:
        pod_spec["serviceAccountName"] = merged.service_account
    if merged.init_containers:
        pod_spec["initContainers"] = merged.init_containers
    if merged.tolerations:
        pod_spec["tolerations"] = merged.tolerations
    if pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": pull_secret}]
    return _combined_object(COMBINED_NAME, members, namespace, pod_spec, surge=False)
