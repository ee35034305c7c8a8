"""Fake nodes (kwok) and waiting on the objects tests care about.

Why kwok nodes: DaemonSet, scheduling and operator tests need Node objects that look Ready and
whose pods turn Running/Ready, at counts from 1 to 1000+, without a container runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from k8stest.controlplane import KWOK_ANNOTATION
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for

KWOK_LABEL = "k8stest.intel.com/kwok"


def node_manifest(
    name: str, *, labels: Mapping[str, str] | None = None, capacity: Mapping[str, str] | None = None
) -> JSON:
    """A Node kwok will manage. No kwok taint: DaemonSets only tolerate node.kubernetes.io/* taints."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        KWOK_LABEL: "true",
        **(labels or {}),
    }
    node: JSON = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {},
    }
    if capacity:
        node["status"] = {"capacity": dict(capacity), "allocatable": dict(capacity)}
    return node


def _is_ready(node: Mapping[str, Any]) -> bool:
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def create_kwok_nodes(
    client: KubeClient,
    count: int,
    *,
    prefix: str = "kwok-node-",
    labels: Mapping[str, str] | None = None,
    workers: int = 8,
    timeout: float = 300.0,
) -> list[str]:
    """Create ``count`` kwok nodes and wait until all are Ready; return their names.

    Creation uses a few connections in parallel, since 1000 sequential round trips dominate the
    set-up time of large tests otherwise.
    """
    names = [f"{prefix}{i}" for i in range(count)]
    clients = [KubeClient(client.creds) for _ in range(max(1, min(workers, count)))]

    def create(idx: int) -> None:
        c = clients[idx % len(clients)]
        for j in range(idx, count, len(clients)):
            c.apply_ok("/api/v1/nodes", node_manifest(names[j], labels=labels))

    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            list(pool.map(create, range(len(clients))))
    finally:
        for c in clients:
            c.close()
    wanted = set(names)

    def all_ready() -> bool:
        ready = {
            n["metadata"]["name"]
            for n in list_all(client, "/api/v1/nodes", label_selector=f"{KWOK_LABEL}=true")
            if _is_ready(n)
        }
        return wanted <= ready

    wait_for(f"{count} kwok nodes Ready", all_ready, timeout=timeout, interval=0.5)
    return names


def delete_kwok_nodes(client: KubeClient, names: list[str]) -> None:
    for name in names:
        try:
            client.delete(f"/api/v1/nodes/{name}")
        except ApiError as e:  # already gone is fine; anything else is not
            if e.status != 404:
                raise


def list_all(client: KubeClient, path: str, *, label_selector: str | None = None) -> list[JSON]:
    """List with pagination (the apiserver pages at ``limit``)."""
    items: list[JSON] = []
    cont = ""
    while True:
        query = "?limit=500"
        if label_selector:
            query += f"&labelSelector={label_selector}"
        if cont:
            query += f"&continue={cont}"
        resp = client.get(path + query)
        items.extend(resp.get("items", []))
        cont = resp.get("metadata", {}).get("continue", "")
        if not cont:
            return items


def wait_daemonset_ready(
    client: KubeClient, namespace: str, name: str, *, expected: int, timeout: float = 300.0
) -> JSON:
    """Wait until the DaemonSet has ``expected`` pods scheduled, up to date and Ready."""

    def ready() -> JSON | None:
        ds = client.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")
        st = ds.get("status", {})
        ok = (
            st.get("desiredNumberScheduled") == expected
            and st.get("numberReady") == expected
            and st.get("updatedNumberScheduled") == expected
            and st.get("observedGeneration") == ds["metadata"].get("generation")
        )
        return ds if ok else None

    return wait_for(f"DaemonSet {namespace}/{name} with {expected} Ready pods", ready, timeout=timeout)
