"""The node agent: pods and their CPUs to RmdWorkloads, and the PodResources client."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
import yaml

from intel_device_plugins.rmd.agent import (
    cpus_by_container,
    desired_workloads,
    exclusive_cpus,
    needs_update,
    quantity,
)
from intel_device_plugins.rmd.model import RmdWorkloadSpec, parse
from intel_device_plugins.rmd.nodeagent import list_pod_resources, wants_cache
from intel_device_plugins.rmd.payload import build_payload
from intel_device_plugins.sim.rmd import RmdState
from k8stest.kubeletapi import podresources_v1_pb2 as pr_pb
from k8stest.kubeletapi import podresources_v1_pb2_grpc as pr_grpc

SAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "rmd" / "samples"


def _pod(sample: str, node: str = "n1", namespace: str = "team-a") -> dict[str, Any]:
    pod: dict[str, Any] = yaml.safe_load((SAMPLES / sample).read_text())
    pod["metadata"].update({"namespace": namespace, "uid": "uid-1"})
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running", "qosClass": "Guaranteed"}
    return pod


def test_guaranteed_pod_becomes_an_owned_workload() -> None:
    pod = _pod("pod-guaranteed-cache.yaml")
    (d,) = desired_workloads(pod, {"container1": [49, 1, 2]})
    assert d.workload is not None and not d.problem
    meta = d.workload["metadata"]
    assert (meta["name"], meta["namespace"]) == ("pod-guaranteed-cache-rmd-workload-container1", "team-a")
    assert meta["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "pod-guaranteed-cache",
        "uid": "uid-1",
        "controller": True,
    }  # no blockOwnerDeletion: that would need pods/finalizers, which the agent is not granted
    assert d.workload["spec"] == {
        "coreIds": ["1-2", "49"],
        "rdt": {"cache": {"max": 2, "min": 2}},
        "nodes": ["n1"],
    }


def test_annotations_become_mba_and_pstate() -> None:
    (mba,) = desired_workloads(_pod("pod-guaranteed-cache-mba.yaml"), {"container1": [4, 5, 6]})
    assert mba.workload is not None
    assert mba.workload["spec"]["rdt"] == {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}}
    (ps,) = desired_workloads(_pod("pod-guaranteed-cache-pstate.yaml"), {"container1": [1, 2, 9]})
    assert ps.workload is not None
    assert ps.workload["spec"]["plugins"] == {"pstate": {"ratio": "1.5", "monitoring": "on"}}
    # RMD's P-state plugin reads each element as one CPU or one range.
    spec = parse(RmdWorkloadSpec, ps.workload["spec"])
    assert RmdState().create(build_payload(spec, "team-a/x"))["core_ids"] == ["1-2", "9"]


def test_multi_container_annotations_stay_with_their_container() -> None:
    pod = _pod("pod-multi-container-guaranteed-cache-mba.yaml")
    one, two = desired_workloads(pod, {"container1": [1, 2], "container2": [3, 4]})
    assert one.workload is not None and two.workload is not None
    assert "mba" not in one.workload["spec"]["rdt"]
    assert two.workload["spec"]["rdt"]["mba"] == {"percentage": 50}
    assert two.workload["spec"]["coreIds"] == ["3-4"]


def test_non_exclusive_container_gets_a_reason_not_an_empty_workload() -> None:
    pod = _pod("pod-guaranteed-cache.yaml")
    c = pod["spec"]["containers"][0]["resources"]
    c["requests"]["cpu"] = c["limits"]["cpu"] = "1500m"
    (d,) = desired_workloads(pod, {"container1": [1]})
    assert d.workload is None and "has no exclusive CPUs" in d.problem
    burstable = _pod("pod-guaranteed-cache.yaml")
    burstable["status"] = {"phase": "Running"}
    del burstable["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert not exclusive_cpus(burstable, burstable["spec"]["containers"][0])
    (d,) = desired_workloads(burstable, {"container1": [1]})
    assert d.workload is None and "Guaranteed QoS" in d.problem


def test_missing_cpus_and_bad_annotations_are_reported() -> None:
    (d,) = desired_workloads(_pod("pod-guaranteed-cache.yaml"), {})
    assert d.workload is None and "no exclusive CPUs for container container1 yet" in d.problem
    pod = _pod("pod-guaranteed-cache.yaml")
    pod["metadata"]["annotations"] = {"container1_mba_percentage": "lots"}
    (d,) = desired_workloads(pod, {"container1": [1]})
    assert d.workload is None and "container1_mba_percentage='lots' is not an integer" in d.problem
    pod["metadata"]["annotations"] = {"container1_mba_percentage": "150"}
    (d,) = desired_workloads(pod, {"container1": [1]})
    assert d.workload is None and "spec.rdt.mba.percentage" in d.problem


def test_generated_containers_are_skipped_and_annotation_changes_propagate() -> None:
    pod = _pod("pod-guaranteed-cache.yaml")
    pod["spec"]["containers"][0]["name"] = "x-rmd-workload-y"
    assert desired_workloads(pod, {}) == ()
    first = desired_workloads(_pod("pod-guaranteed-cache.yaml"), {"container1": [1]})[0].workload
    assert first is not None
    stored = copy.deepcopy(first)
    assert not needs_update(first, stored)
    changed = _pod("pod-guaranteed-cache.yaml")
    changed["metadata"]["annotations"] = {"container1_policy": "gold"}
    second = desired_workloads(changed, {"container1": [1]})[0].workload
    assert second is not None and needs_update(second, stored)


def test_cpus_are_matched_by_namespace_and_name() -> None:
    listing = [
        {"name": "p", "namespace": "default", "containers": [{"name": "c", "cpu_ids": [9]}]},
        {"name": "p", "namespace": "team-a", "containers": [{"name": "c", "cpu_ids": [3, 1]}]},
    ]
    assert cpus_by_container(listing, "team-a", "p") == {"c": [1, 3]}
    assert cpus_by_container(listing, "team-b", "p") == {}


@pytest.mark.parametrize(("text", "value"), [("3", 3), ("500m", 0.5), ("64Mi", 64 * 2**20), ("2k", 2000)])
def test_quantity(text: str, value: float) -> None:
    assert quantity(text) == pytest.approx(value)
    with pytest.raises(ValueError, match="invalid quantity"):
        quantity("three")


def test_wants_cache() -> None:
    assert wants_cache(_pod("pod-guaranteed-cache.yaml"))
    assert not wants_cache({"spec": {"containers": [{"name": "c"}]}})


class _Lister(pr_grpc.PodResourcesListerServicer):
    async def List(self, request: Any, context: Any) -> pr_pb.ListPodResourcesResponse:
        container = pr_pb.ContainerResources(name="container1", cpu_ids=[2, 1])
        return pr_pb.ListPodResourcesResponse(
            pod_resources=[pr_pb.PodResources(name="p", namespace="ns", containers=[container])]
        )


async def test_pod_resources_client(tmp_path: Path) -> None:
    server = grpc.aio.server()
    pr_grpc.add_PodResourcesListerServicer_to_server(_Lister(), server)  # type: ignore[abstract]
    sock = tmp_path / "kubelet.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    try:
        listing = await list_pod_resources(f"unix://{sock}")
    finally:
        await server.stop(None)
    assert cpus_by_container(listing, "ns", "p") == {"container1": [1, 2]}
    with pytest.raises(ValueError, match="only unix://"):
        await list_pod_resources("tcp://127.0.0.1:1")
