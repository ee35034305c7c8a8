"""The RMD operator's decisions as pure functions: what to apply, call and report, given what was observed.

Three controllers share these: RmdConfig (DaemonSets and one RmdNodeState per RMD node), RmdNodeState
(mirror each RMD's workloads, keep the last good copy marked stale when RMD cannot be read, remove workloads
whose CR is gone) and RmdWorkload (make every targeted RMD hold exactly the workload the spec describes and
no other RMD hold it). The shells in ``operator.py`` only fetch inputs and carry out the returned plans.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from intel_device_plugins.rmd import images
from intel_device_plugins.rmd.model import (
    API_VERSION,
    NODE_STATE_PREFIX,
    RmdConfigSpec,
    RmdWorkloadSpec,
)
from intel_device_plugins.rmd.payload import (
    build_payload,
    find,
    node_state_entry,
    parse_uuid,
    patch_applies,
    same_cpus,
    same_resources,
    workload_state,
)

NFD_RDT_LABEL: Final = "feature.node.kubernetes.io/cpu-rdt.RDTL3CA"
DEFAULT_RMD_SELECTOR: Final[Mapping[str, str]] = {NFD_RDT_LABEL: "true"}
RMD_DAEMONSET: Final = "rmd"
AGENT_DAEMONSET: Final = "rmd-node-agent"
RMD_POD_LABELS: Final[Mapping[str, str]] = {"name": "rmd-pod"}
AGENT_POD_LABELS: Final[Mapping[str, str]] = {"name": "rmd-node-agent-pod"}
AGENT_SERVICE_ACCOUNT: Final = "intel-rmd-node-agent"
FINALIZER: Final = "intel.com/rmd-workload-cleanup"
RMD_SERVER_SECRET: Final = "intel-rmd-server-tls"  # RMD's serving certificate and the client CA
RMD_CLIENT_SECRET: Final = "intel-rmd-client-tls"  # the client certificate RMD lets in (operator, plugin)
SERVER_TLS_ANNOTATION: Final = "intel.com/rmd-server-tls"  # on RMD's pod template: its start-time TLS digest
RMD_CONFIG_MAP: Final = "intel-rmd-config"  # rmd.toml, shipped by deploy/rmd and the chart
RMD_CONF_DIR: Final = "/etc/rmd/conf"
# RMD's image starts it in debug mode (``rmd -d``: plain HTTP, no authentication); the command replaces that.
RMD_COMMAND: Final = ("/usr/bin/rmd", "--conf-dir", RMD_CONF_DIR)
MANAGED_BY: Final[Mapping[str, str]] = {"app.kubernetes.io/managed-by": "intel-rmd-operator"}


# ----------------------------------------------------------------------------------------------------
# RmdConfig


def rmd_selector(cfg: RmdConfigSpec) -> dict[str, str]:
    """Nodes that run RMD: the config's selector, or NFD's L3 CAT label when it is empty (never all nodes)."""
    return dict(cfg.rmd_node_selector) if cfg.rmd_node_selector else dict(DEFAULT_RMD_SELECTOR)


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def node_state_name(node: str) -> str:
    return NODE_STATE_PREFIX + node


def _owner(owner: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "RmdConfig",
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _secret_volume(name: str, secret: str) -> dict[str, Any]:
    return {"name": name, "secret": {"secretName": secret, "defaultMode": 0o400}}


def _host_volume(name: str, path: str, kind: str = "Directory") -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


_RESTRICTED: Final[Mapping[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _daemonset(
    name: str, namespace: str, owner: Mapping[str, str], labels: Mapping[str, str], pod_spec: dict[str, Any]
) -> dict[str, Any]:
    """A DaemonSet controlled by the RmdConfig, labelled as managed by this operator."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**MANAGED_BY},
            "ownerReferences": [_owner(owner)],
        },
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def rmd_daemonset(
    cfg: RmdConfigSpec, owner: Mapping[str, str], namespace: str, node_image: str, server_tls: str = ""
) -> dict[str, Any]:
    """RMD (HTTPS with client certificates on 8443) plus the l3_cache_ways device plugin on each RMD node.

    RMD runs with an explicit command and ``rmd.toml`` from the ``intel-rmd-config`` ConfigMap: never the
    image's debug mode, and its default ``signature`` authorisation with the client certificate of
    ``intel-rmd-client-tls`` in its admin directory (the only certificate it lets in). RMD writes resctrl,
    so it alone is privileged; the plugin talks to it over loopback with that client certificate.

    ``server_tls`` (a digest of what RMD reads only at start, see ``rotation``) goes on the pod template, so
    a rotation restarts RMD pods one by one exactly when that material changed. The admin directory also
    holds the client certificates a rotation introduces or retires (``next.crt``, ``previous.crt``): the
    Secret's keys are optional there, as they exist only during a rotation.
    """
    labels = {**RMD_POD_LABELS}
    rmd = {
        "name": "rmd",
        "image": cfg.rmd_image or images.default_rmd_image(),
        "command": list(RMD_COMMAND),
        "ports": [{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
        # Readiness changes reach the operator through its pod watch: an RMD that stops answering is
        # marked stale without waiting for the next periodic read.
        "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 10, "failureThreshold": 2},
        "securityContext": {"privileged": True, "readOnlyRootFilesystem": False},
        "volumeMounts": [
            {"name": "sysfs", "mountPath": "/sys/fs"},
            {"name": "rmd-config", "mountPath": RMD_CONF_DIR, "readOnly": True},
            {"name": "server-tls", "mountPath": "/etc/rmd/cert/server", "readOnly": True},
            {"name": "client-ca", "mountPath": "/etc/rmd/cert/client", "readOnly": True},
            {"name": "admin-certs", "mountPath": "/etc/rmd/acl/roles/admin", "readOnly": True},
            {"name": "user-certs", "mountPath": "/etc/rmd/acl/roles/user", "readOnly": True},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    plugin = {
        "name": "intel-rmd-deviceplugin",
        "image": node_image,
        "command": [
            images.DEVICE_PLUGIN_COMMAND,
            "--rmd-address",
            "https://127.0.0.1:8443",
            "--tls-dir",
            "/etc/rmd-tls",
        ],
        "securityContext": {**_RESTRICTED},
        "volumeMounts": [
            {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "client-tls", "mountPath": "/etc/rmd-tls", "readOnly": True},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}},
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": rmd_selector(cfg),
        "automountServiceAccountToken": False,
        "containers": [rmd, plugin],
        "volumes": [
            _host_volume("sysfs", "/sys/fs"),
            _host_volume("device-plugins", "/var/lib/kubelet/device-plugins"),
            {
                "name": "rmd-config",
                "configMap": {"name": RMD_CONFIG_MAP, "items": [{"key": "rmd.toml", "path": "rmd.toml"}]},
            },
            {
                "name": "server-tls",
                "secret": {
                    "secretName": RMD_SERVER_SECRET,
                    "defaultMode": 0o400,
                    "items": [
                        {"key": "ca.crt", "path": "ca.pem"},
                        {"key": "tls.crt", "path": "rmd-cert.pem"},
                        {"key": "tls.key", "path": "rmd-key.pem"},
                    ],
                },
            },
            {
                "name": "client-ca",
                "secret": {
                    "secretName": RMD_SERVER_SECRET,
                    "defaultMode": 0o400,
                    "items": [{"key": "ca.crt", "path": "ca.pem"}],
                },
            },
            _secret_volume("client-tls", RMD_CLIENT_SECRET),
            {
                "name": "admin-certs",
                "secret": {
                    "secretName": RMD_CLIENT_SECRET,
                    "defaultMode": 0o444,
                    "items": [
                        {"key": "tls.crt", "path": f"{RMD_CLIENT_SECRET}.pem"},
                        {"key": "next.crt", "path": f"{RMD_CLIENT_SECRET}-next.pem"},
                        {"key": "previous.crt", "path": f"{RMD_CLIENT_SECRET}-previous.pem"},
                    ],
                    # Missing keys are skipped only for an optional Secret; a missing Secret leaves the
                    # directory empty, so RMD admits nobody.
                    "optional": True,
                },
            },
            # RMD watches its user directory and will not start without it; nobody is listed there.
            {"name": "user-certs", "emptyDir": {"sizeLimit": "1Mi"}},
        ],
    }
    ds = _daemonset(RMD_DAEMONSET, namespace, owner, labels, pod_spec)
    if server_tls:
        ds["spec"]["template"]["metadata"]["annotations"] = {SERVER_TLS_ANNOTATION: server_tls}
    return ds


def rolled_out(ds: Mapping[str, Any], server_tls: str) -> bool:
    """``ds`` (RMD's DaemonSet) has ``server_tls`` on its template and every scheduled pod is updated and
    available: every RMD has restarted with that material."""
    meta, status = ds.get("metadata") or {}, ds.get("status") or {}
    template = ((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}
    if (template.get("annotations") or {}).get(SERVER_TLS_ANNOTATION) != server_tls:
        return False
    desired = status.get("desiredNumberScheduled", 0)
    return bool(
        status.get("observedGeneration", 0) >= meta.get("generation", 0)
        and status.get("updatedNumberScheduled", 0) == desired
        and status.get("numberAvailable", 0) == desired
        and not status.get("numberUnavailable")
    )


def agent_daemonset(
    cfg: RmdConfigSpec, owner: Mapping[str, str], namespace: str, node_image: str
) -> dict[str, Any]:
    """The node agent on each RMD node: reads the kubelet's PodResources socket, writes RmdWorkloads."""
    labels = {**AGENT_POD_LABELS}
    agent = {
        "name": "intel-rmd-node-agent",
        "image": node_image,
        "command": [images.NODE_AGENT_COMMAND],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "securityContext": {**_RESTRICTED},
        "volumeMounts": [
            {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}},
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": rmd_selector(cfg),
        "serviceAccountName": AGENT_SERVICE_ACCOUNT,
        "containers": [agent],
        "volumes": [_host_volume("pod-resources", "/var/lib/kubelet/pod-resources")],
    }
    return _daemonset(AGENT_DAEMONSET, namespace, owner, labels, pod_spec)


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class ConfigPlan:
    daemonsets: tuple[dict[str, Any], ...]
    delete_agent: bool
    create_node_states: tuple[dict[str, Any], ...]
    delete_node_states: tuple[str, ...]
    status: dict[str, Any]


def plan_config(
    cfg: RmdConfigSpec,
    owner: Mapping[str, str],
    namespace: str,
    nodes: Sequence[NodeInfo],
    node_states: Sequence[str],
    node_image: str | None = None,
    server_tls: str = "",
) -> ConfigPlan:
    """DaemonSets to apply; node states to create for newly selected nodes and delete for nodes that left.

    ``node_image`` runs the agent and the device plugin (default: this project's node image); ``server_tls``
    is the digest of RMD's start-time TLS material (see ``rmd_daemonset``).
    """
    node_image = node_image or images.default_node_image()
    selector = rmd_selector(cfg)
    selected = sorted((n for n in nodes if selects(selector, n.labels)), key=lambda n: n.name)
    wanted = {node_state_name(n.name): n for n in selected}
    creates = tuple(
        {
            "apiVersion": API_VERSION,
            "kind": "RmdNodeState",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [_owner(owner)]},
            "spec": {"node": n.name, "nodeUid": n.uid},
        }
        for name, n in wanted.items()
        if name not in node_states
    )
    deletes = tuple(sorted(s for s in node_states if s not in wanted))
    daemonsets = [rmd_daemonset(cfg, owner, namespace, node_image, server_tls)]
    if cfg.deploy_node_agent:
        daemonsets.append(agent_daemonset(cfg, owner, namespace, node_image))
    return ConfigPlan(
        tuple(daemonsets),
        not cfg.deploy_node_agent,
        creates,
        deletes,
        {"nodes": [n.name for n in selected]},
    )


# ----------------------------------------------------------------------------------------------------
# RMD address (without reading any file baked into an image)


def rmd_host(node: NodeInfo, node_addresses: Sequence[str], pods: Sequence[Mapping[str, Any]]) -> str:
    """IP of the RMD pod serving ``node``: by spec.nodeName, else by the pod's hostIP; else LookupError."""
    on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node.name]
    if not on_node:
        on_node = [p for p in pods if (p.get("status") or {}).get("hostIP") in node_addresses]
    if not on_node:
        raise LookupError(f"no RMD pod runs on node {node.name}")
    status = on_node[0].get("status") or {}
    ip = status.get("podIP") or next((a.get("ip") for a in status.get("podIPs") or () if a.get("ip")), "")
    if not ip:
        raise LookupError(f"the RMD pod on node {node.name} has no address yet")
    return str(ip)


# ----------------------------------------------------------------------------------------------------
# RmdNodeState


def node_state_status(
    previous: Mapping[str, Any] | None,
    workloads: Sequence[Mapping[str, Any]] | None,
    error: str,
    now: str,
    sync_age_s: float = float("inf"),
    refresh_s: float = 60.0,
) -> dict[str, Any]:
    """The node state after a read of RMD. A failed read keeps the last known workloads, marked stale.

    ``lastSync`` moves only when something changed or it is older than ``refresh_s`` (``sync_age_s`` is its
    age), so an idle node costs no API writes between refreshes.
    """
    prev = dict(previous or {})
    if workloads is None:
        kept = prev.get("workloads") or {}
        return {
            "workloads": kept,
            "workloadCount": len(kept),
            "stale": True,
            "message": error,
            **({"lastSync": prev["lastSync"]} if prev.get("lastSync") else {}),
        }
    entries = {str(w.get("uuid") or w.get("id")): node_state_entry(w) for w in workloads}
    out = {
        "workloads": entries,
        "workloadCount": len(entries),
        "stale": False,
        "message": "",
        "lastSync": now,
    }
    unchanged = {**out, "lastSync": prev.get("lastSync")} == prev
    if unchanged and prev.get("lastSync") and sync_age_s < refresh_s:
        out["lastSync"] = prev["lastSync"]
    return out


def orphans(workloads: Sequence[Mapping[str, Any]], live: frozenset[tuple[str, str]]) -> tuple[str, ...]:
    """Ids of workloads this operator created whose RmdWorkload is gone (deleted while RMD was away)."""
    out = []
    for w in workloads:
        key = parse_uuid(str(w.get("uuid") or ""))
        if key is not None and key not in live and w.get("origin", "REST") == "REST" and str(w.get("id", "")):
            out.append(str(w["id"]))
    return tuple(out)


def nodes_holding(uuid: str, node_states: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Nodes whose RmdNodeState (its last read of RMD, stale or not) lists workload ``uuid``."""
    return frozenset(
        str((s.get("spec") or {}).get("node"))
        for s in node_states
        if uuid in ((s.get("status") or {}).get("workloads") or {})
    )


def needs_reconcile(
    workloads: Sequence[Mapping[str, Any]], node: str, crs: Mapping[tuple[str, str], Mapping[str, Any]]
) -> tuple[tuple[str, str], ...]:
    """CRs whose status says RMD on ``node`` holds them under an id it no longer lists (RMD restarted)."""
    by_uuid = {str(w.get("uuid")): str(w.get("id")) for w in workloads}
    out = []
    for key, status in crs.items():
        state = ((status or {}).get("workloadStates") or {}).get(node)
        if state and state.get("id") and by_uuid.get(f"{key[0]}/{key[1]}") != state.get("id"):
            out.append(key)
    return tuple(sorted(out))


# ----------------------------------------------------------------------------------------------------
# RmdWorkload


def targets(
    spec: RmdWorkloadSpec, nodes: Sequence[NodeInfo], rmd_nodes: frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nodes to enforce on, named nodes that do not run RMD). A selector is matched among RMD nodes only."""
    if spec.node_selector:
        chosen = sorted(
            n.name for n in nodes if n.name in rmd_nodes and selects(spec.node_selector, n.labels)
        )
        return tuple(chosen), ()
    named = list(dict.fromkeys(spec.nodes))
    return tuple(n for n in named if n in rmd_nodes), tuple(n for n in named if n not in rmd_nodes)


class Act(enum.Enum):
    CREATE = "create"  # POST
    UPDATE = "update"  # PATCH: resources changed, same CPUs, nothing to take away
    REPLACE = "replace"  # DELETE + POST: new CPUs, or a setting to remove (RMD's PATCH keeps what it omits)
    DELETE = "delete"  # node no longer targeted, or the CR is being deleted
    KEEP = "keep"  # already as desired
    UNREACHABLE = "unreachable"
    GONE = "gone"  # not targeted and not on RMD: drop from status


CHANGES_RMD: Final = frozenset({Act.CREATE, Act.UPDATE, Act.REPLACE, Act.DELETE})


@dataclasses.dataclass(frozen=True)
class NodeView:
    """What one RMD node looked like: its workloads and CPUs, or why it could not be read."""

    node: str
    workloads: tuple[Mapping[str, Any], ...] | None
    host_cpus: frozenset[int] | None = None
    error: str = ""


@dataclasses.dataclass(frozen=True)
class NodeAction:
    node: str
    act: Act
    workload_id: str = ""
    payload: Mapping[str, Any] | None = None
    existing: Mapping[str, Any] | None = None
    error: str = ""


def plan_workload(
    spec: RmdWorkloadSpec | None, uuid: str, wanted: Sequence[str], views: Sequence[NodeView]
) -> tuple[NodeAction, ...]:
    """One action per RMD node. ``spec`` None means the CR is being deleted: remove it everywhere."""
    out: list[NodeAction] = []
    targeted = set(wanted) if spec is not None else set()
    for view in views:
        if view.workloads is None:
            out.append(NodeAction(view.node, Act.UNREACHABLE, error=view.error))
            continue
        existing = find(view.workloads, uuid)
        wid = str(existing.get("id", "")) if existing else ""
        if view.node not in targeted:
            out.append(NodeAction(view.node, Act.DELETE if existing else Act.GONE, wid, existing=existing))
            continue
        assert spec is not None
        try:
            payload = build_payload(spec, uuid, view.host_cpus)
        except ValueError as exc:
            out.append(NodeAction(view.node, Act.UNREACHABLE, error=str(exc)))
            continue
        if existing is None:
            act = Act.CREATE
        elif not same_cpus(payload, existing):
            act = Act.REPLACE
        elif not same_resources(payload, existing):
            act = Act.UPDATE if patch_applies(payload, existing) else Act.REPLACE
        else:
            act = Act.KEEP
        out.append(NodeAction(view.node, act, wid, payload, existing))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """Outcome of one node's action: RMD's workload afterwards (None if absent) and the response line."""

    node: str
    response: str
    workload: Mapping[str, Any] | None
    removed: bool = False


def workload_status(
    previous: Mapping[str, Any] | None,
    wanted: Sequence[str],
    missing: Sequence[str],
    results: Sequence[NodeResult],
    generation: int | None,
) -> dict[str, Any]:
    """``status`` of an RmdWorkload: one entry per targeted node saying what RMD holds and what happened."""
    prev_states = dict((previous or {}).get("workloadStates") or {})
    states: dict[str, Any] = {}
    for r in results:
        if r.removed or (r.node not in wanted and r.workload is None):
            continue
        if r.workload is not None:
            states[r.node] = workload_state(r.workload, r.response)
        else:
            keep = dict(prev_states.get(r.node) or {})
            keep["response"] = r.response
            states[r.node] = keep
    for node in missing:
        states[node] = {
            "response": f"Fail: node {node} does not run RMD (not selected by the RmdConfig, or unknown)"
        }
    for node in wanted:
        if node not in states:
            states[node] = {"response": "Fail: no RMD answer for this node yet"}
    enforced = sum(1 for n in wanted if states.get(n, {}).get("status") == "Successful")
    out: dict[str, Any] = {
        "workloadStates": states,
        "enforced": f"{enforced}/{len(wanted) + len(missing)}",
        "message": "",
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def invalid_status(message: str, generation: int | None) -> dict[str, Any]:
    """Status of a CR whose spec cannot be used (stored before the CRD's rules, or bad for this operator)."""
    out: dict[str, Any] = {"workloadStates": {}, "enforced": "0/0", "message": message}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def cleanup_done(
    actions: Sequence[NodeAction], failed: Sequence[str], waited_s: float, grace_s: float
) -> bool:
    """Whether the finalizer can go: every RMD confirmed removal, or the unreachable ones exceeded the grace
    period (their copies are removed later by the node-state controller's orphan sweep)."""
    unreachable = [a for a in actions if a.act is Act.UNREACHABLE]
    if failed:
        return False
    return not unreachable or waited_s >= grace_s
