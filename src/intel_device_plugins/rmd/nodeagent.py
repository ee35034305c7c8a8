"""``intel-rmd-node-agent``: one per node, turning its pods' cache-way requests into RmdWorkloads.

Each agent watches only the pods of its own node (field selector ``spec.nodeName``), asks the kubelet's
PodResources API which CPUs each container got, and creates or updates the RmdWorkloads ``agent.py``
derives, owned by the pod so they go when it goes. There is no leader election: every node has its own agent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.kube.apierrors import is_status
from intel_device_plugins.kube.watch import as_events, follow
from intel_device_plugins.kube.workqueue import WorkQueue, run_worker
from intel_device_plugins.kubeletapi import podresources_v1 as pr
from intel_device_plugins.kubeletapi.rpc import call_unary
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging
from intel_device_plugins.rmd.agent import RESOURCE, cpus_by_container, desired_workloads, needs_update
from intel_device_plugins.rmd.operator import RmdWorkload

log = logging.getLogger(__name__)

POD_RESOURCES_SOCKET: Final = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"
FIELD_MANAGER: Final = "intel-rmd-node-agent"


async def list_pod_resources(target: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The kubelet's PodResources List as plain dicts (name, namespace, containers[name, cpu_ids])."""
    if not target.startswith("unix://"):
        raise ValueError(f"{target}: only unix:// sockets are supported")
    socket = Path(target.removeprefix("unix://"))
    resp = await call_unary(socket, pr.PodResourcesLister.List, pr.ListPodResourcesRequest(), timeout_s)
    return [
        {
            "name": p.name,
            "namespace": p.namespace,
            "containers": [{"name": c.name, "cpu_ids": list(c.cpu_ids)} for c in p.containers],
        }
        for p in resp.pod_resources
    ]


def wants_cache(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return any(
        RESOURCE in ((c.get("resources") or {}).get("limits") or {})
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    )


class NodeAgent:
    def __init__(self, client: AsyncClient, node: str, socket: str, resync_s: float = 30.0) -> None:
        self.client = client
        self.node = node
        self.socket = socket
        self.resync_s = resync_s
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self._reported: set[tuple[str, str]] = set()

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(run_worker(self.queue, self._reconcile_key, self._failed)) for _ in range(2)
        ]
        tasks += [asyncio.create_task(self._watch()), asyncio.create_task(self._resync())]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _offer(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if wants_cache(pod) and (pod.get("status") or {}).get("phase") == "Running":
            self.queue.add((str(meta.get("namespace")), str(meta.get("name"))))

    def _watch(self) -> Coroutine[Any, Any, None]:
        def on_pod(event: str, pod: dict[str, Any]) -> None:
            self._offer(pod)

        return follow(
            self.client, Pod, as_events(on_pod), on_pod, namespace="*", fields={"spec.nodeName": self.node}
        )

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            try:
                async for pod in self.client.list(Pod, namespace="*", fields={"spec.nodeName": self.node}):
                    self._offer(pod.to_dict())
            except Exception as exc:
                log.warning("pod resync failed: %s", exc)

    async def _reconcile_key(self, key: tuple[str, str]) -> None:
        await self.reconcile(*key)

    def _failed(self, key: tuple[str, str], exc: Exception) -> None:
        log.warning("pod %s/%s: %s", key[0], key[1], exc)

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            pod = (await self.client.get(Pod, name, namespace=namespace)).to_dict()
        except Exception as exc:
            if is_status(exc, 404):
                return
            raise
        if (pod.get("status") or {}).get("phase") != "Running" or (pod.get("spec") or {}).get(
            "nodeName"
        ) != self.node:
            return
        cpus = cpus_by_container(await list_pod_resources(self.socket), namespace, name)
        for want in desired_workloads(pod, cpus):
            if want.workload is None:
                await self._event(pod, want.problem)
                continue
            wname = want.workload["metadata"]["name"]
            try:
                existing: dict[str, Any] | None = dict(
                    await self.client.get(RmdWorkload, wname, namespace=namespace)
                )
            except Exception as exc:
                if not is_status(exc, 404):
                    raise
                existing = None
            if existing is None:
                await self.client.create(RmdWorkload.from_dict(want.workload))
                log.info("created RmdWorkload %s/%s", namespace, wname)
            elif needs_update(want.workload, existing):
                patch = [{"op": "replace", "path": "/spec", "value": want.workload["spec"]}]
                await self.client.patch(
                    RmdWorkload, wname, patch, namespace=namespace, patch_type=PatchType.JSON
                )
                log.info("updated RmdWorkload %s/%s", namespace, wname)

    async def _event(self, pod: Mapping[str, Any], message: str) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid")), message)
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), message)
        event = Event(
            metadata=ObjectMeta(generateName=f"{meta.get('name')}.", namespace=meta.get("namespace")),
            involvedObject=ObjectReference(
                apiVersion="v1",
                kind="Pod",
                name=meta.get("name"),
                namespace=meta.get("namespace"),
                uid=meta.get("uid"),
            ),
            reason="RmdWorkloadNotCreated",
            message=message,
            type="Warning",
            source=EventSource(component="intel-rmd-node-agent", host=self.node),
        )
        try:
            await self.client.create(event)
        except Exception as exc:
            log.info("could not post event: %s", exc)


def build_parser() -> GoFlagParser:
    parser = GoFlagParser(prog="intel-rmd-node-agent", description=__doc__)
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    parser.add_argument("--pod-resources-socket", default=POD_RESOURCES_SOCKET)
    parser.add_argument("--resync", type=float, default=30.0)
    add_verbosity_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbosity)
    if not args.node_name:
        parser.error("--node-name (or NODE_NAME) is required: the agent serves its own node only")

    async def run() -> None:
        client = AsyncClient(field_manager=FIELD_MANAGER)
        await NodeAgent(client, args.node_name, args.pod_resources_socket, args.resync).run()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
