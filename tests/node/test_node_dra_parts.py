"""The pure parts of DRA on the real node: feature-gate metrics, the objects tests create, the
kubelet's plugin directories in the node's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra import checkpoint
from intel_device_plugins.dra.model import ClaimRef, PreparedClaim, PreparedDevice
from k8stest.node import NodeLayout, workload_pod
from k8stest.node.dra import (
    checkpoint_claims,
    claim_template,
    device_class,
    device_health,
    enabled_feature_gates,
    leftovers,
    pod_claim_names,
    with_claims,
)

METRICS = """\
# HELP kubernetes_feature_enabled [BETA] The stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="BETA"} 1
kubernetes_feature_enabled{name="DRADerivedAttributes",stage="ALPHA"} 0
kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1
kubernetes_feature_enabled_total{name="Bogus",stage="BETA"} 1
apiserver_request_total{code="200"} 7
"""


def test_feature_gates_are_read_from_the_components_metrics() -> None:
    assert enabled_feature_gates(METRICS) == {
        "DRAConsumableCapacity": True,
        "DRADerivedAttributes": False,
        "DynamicResourceAllocation": True,
    }
    assert enabled_feature_gates("") == {}


def test_kubelet_plugin_directories_live_under_the_nodes_kubelet_directory(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path, "/k8stest-x")
    assert layout.plugins_registry_dir == tmp_path / "kubelet" / "plugins_registry"
    assert layout.plugins_dir == tmp_path / "kubelet" / "plugins"


def test_a_pod_gets_its_claims_from_templates_for_its_first_container() -> None:
    pod = with_claims(workload_pod("p", "node", "true", limits={"cpu": "1"}), {"gpu": "one-gpu"})
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    resources = spec["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    # The original manifest is left alone.
    assert "resourceClaims" not in workload_pod("p", "node", "true")["spec"]


def test_claim_template_asks_for_capacity_and_selects_by_cel() -> None:
    template = claim_template(
        "half",
        "gpu.intel.com",
        selectors=['device.attributes["gpu.intel.com"].driver == "i915"'],
        capacity={"memory": "4Gi"},
    )
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "device"
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "gpu.intel.com"
    assert exactly["allocationMode"] == "ExactCount" and exactly["count"] == 1
    assert exactly["capacity"] == {"requests": {"memory": "4Gi"}}
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.intel.com"].driver == "i915"'}}
    ]
    assert "capacity" not in claim_template("t", "c")["spec"]["spec"]["devices"]["requests"][0]["exactly"]


@pytest.mark.parametrize(("extended", "expected"), [("", None), ("gpu.intel.com/i915", "gpu.intel.com/i915")])
def test_device_class_selects_its_driver(extended: str, expected: str | None) -> None:
    cls = device_class("i915.gpu.intel.com", "gpu.intel.com", extended_resource_name=extended)
    assert cls["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "gpu.intel.com"'}}]
    assert cls["spec"].get("extendedResourceName") == expected


def test_pod_claim_names_skip_claims_not_generated_yet() -> None:
    pod = {
        "status": {
            "resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "p-gpu-x7k2"},
                {"name": "later"},
            ]
        }
    }
    assert pod_claim_names(pod) == {"gpu": "p-gpu-x7k2"}
    assert pod_claim_names({}) == {}


def _prepared(uid: str) -> PreparedClaim:
    device = PreparedDevice(("gpu",), "node", "card0", (f"k8s.gpu.intel.com/claim={uid}-card0",))
    return PreparedClaim(
        ClaimRef("default", f"claim-{uid}", uid), (device,), (f"k8s.gpu.intel.com-claim_{uid}.json",)
    )


def test_leftovers_name_the_cdi_specs_and_checkpoint_entries_of_the_claims_asked_about(
    tmp_path: Path,
) -> None:
    layout = NodeLayout(tmp_path, "/k8stest-x")
    driver = "gpu.intel.com"
    assert checkpoint_claims(layout.plugins_dir, driver) == set()
    assert leftovers(layout, driver) == []
    (layout.plugins_dir / driver).mkdir(parents=True)
    (layout.plugins_dir / driver / checkpoint.FILE_NAME).write_bytes(
        checkpoint.encode(driver, {"u1": _prepared("u1"), "u2": _prepared("u2")})
    )
    layout.cdi_run_dir.mkdir(parents=True)
    (layout.cdi_run_dir / "k8s.gpu.intel.com-claim_u1.json").write_text("{}")
    (layout.cdi_run_dir / "intel.com-gpu.yaml").write_text("{}")  # a device plugin's, not the driver's
    assert checkpoint_claims(layout.plugins_dir, driver) == {"u1", "u2"}
    assert leftovers(layout, driver, ["u1"]) == [
        f"CDI spec {layout.cdi_run_dir / 'k8s.gpu.intel.com-claim_u1.json'}",
        f"checkpoint entry u1 in {layout.plugins_dir / driver / checkpoint.FILE_NAME}",
    ]
    assert [item.split()[0:3] for item in leftovers(layout, driver)] == [
        ["CDI", "spec", str(layout.cdi_run_dir / "k8s.gpu.intel.com-claim_u1.json")],
        ["checkpoint", "entry", "u1"],
        ["checkpoint", "entry", "u2"],
    ]
    assert leftovers(layout, driver, ["u3"]) == []


def test_device_health_is_read_from_the_containers_allocated_resources_status() -> None:
    pod = {
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "allocatedResourcesStatus": [
                        {
                            "name": "claim:p-gpu-x/gpu",
                            "resources": [
                                {
                                    "resourceID": "k8s.gpu.intel.com/claim=u-card1",
                                    "health": "Unhealthy",
                                    "message": "gone",
                                },
                                {"resourceID": "gpu.intel.com/node/card2", "health": "Healthy"},
                            ],
                        }
                    ],
                },
                {"name": "side"},
            ]
        }
    }
    assert device_health(pod) == {
        "k8s.gpu.intel.com/claim=u-card1": {"health": "Unhealthy", "message": "gone"},
        "gpu.intel.com/node/card2": {"health": "Healthy", "message": ""},
    }
    assert device_health({}) == {}
