"""The pure parts of k8stest.node.drakinds, without a node: the pod builder, the device listing's
parser, and the node description the end-to-end tests count on."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.plugins.idxd.discovery import DSA
from intel_device_plugins.plugins.idxd.dra import scan_queue_devices
from intel_device_plugins.plugins.sgx.dra import scan_sgx_devices
from intel_device_plugins.sim.node import build_node, parse_node_spec
from k8stest.node.drakinds import KINDS_NODE_NAME, KINDS_NODE_PROFILE, claim_pod, dev_lines


def test_claim_pod_gives_every_claim_and_limit_to_its_container() -> None:
    pod = claim_pod("p", "n", {"a": "t1", "b": "t2"}, limits={"sgx.intel.com/enclave": "1"})
    spec = pod["spec"]
    assert spec["resourceClaims"] == [
        {"name": "a", "resourceClaimTemplateName": "t1"},
        {"name": "b", "resourceClaimTemplateName": "t2"},
    ]
    (container,) = spec["containers"]
    assert container["resources"] == {
        "limits": {"sgx.intel.com/enclave": "1"},
        "claims": [{"name": "a"}, {"name": "b"}],
    }
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "n"}


def test_claim_pod_without_claims_has_none() -> None:
    spec = claim_pod("p", "n", {})["spec"]
    assert "resourceClaims" not in spec
    assert "claims" not in spec["containers"][0].get("resources", {})


def test_dev_lines_reads_only_the_listing() -> None:
    log = "dev null\nsomething else\ndev dsa/wq0.1\ndev char/60:3\n"
    assert dev_lines(log) == {"null", "dsa/wq0.1", "char/60:3"}


def test_the_node_has_one_dedicated_and_one_shared_dsa_queue_and_64_mib_of_epc(tmp_path: Path) -> None:
    spec = parse_node_spec(KINDS_NODE_PROFILE, "KINDS_NODE_PROFILE")
    assert spec.name == KINDS_NODE_NAME
    build_node(spec, tmp_path)
    queues = {d.name: d.attributes["mode"] for d in scan_queue_devices(str(tmp_path), DSA).devices}
    assert queues == {"dsa0-wq0-0": "dedicated", "dsa0-wq0-1": "shared"}
    enclave = scan_sgx_devices(str(tmp_path)).by_name()["enclave"]
    assert enclave.capacity["epc"].value == "64Mi"
