"""The pure parts of k8stest.node.drakinds, without a node: the pod builder, the device listing's
parser, and the node description the end-to-end tests count on."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID
from intel_device_plugins.plugins.dlb import dracli as dlb
from intel_device_plugins.plugins.dsa import dracli as dsa
from intel_device_plugins.plugins.fpga import dracli as fpga
from intel_device_plugins.plugins.iaa import dracli as iaa
from intel_device_plugins.plugins.idxd.discovery import DSA
from intel_device_plugins.plugins.idxd.dra import scan_queue_devices
from intel_device_plugins.plugins.npu import dracli as npu
from intel_device_plugins.plugins.qat import dracli as qat
from intel_device_plugins.plugins.qat.kernel import run_command
from intel_device_plugins.plugins.sgx.dra import scan_sgx_devices
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.qat import ADF_CTL
from k8stest.node.drakinds import HOT_PLUG, KINDS_NODE_NAME, KINDS_NODE_PROFILE, claim_pod, dev_lines


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
    assert queues == {"0000-10-00-0-wq0": "dedicated", "0000-10-00-0-wq1": "shared"}
    enclave = scan_sgx_devices(str(tmp_path)).by_name()["enclave"]
    assert enclave.capacity["epc"].value == "64Mi"


# Kind -> its driver's command line module and the flags the real-node test gives it.
DRIVERS: dict[str, tuple[ModuleType, list[str]]] = {
    "dsa": (dsa, []),
    "iaa": (iaa, []),
    "dlb": (dlb, []),
    "npu": (npu, []),
    "qat": (qat, []),
    "fpga": (fpga, ["-mode", "region"]),
}


def _published(kind: str, root: Path, *extra: str) -> dict[str, str]:
    """Device name -> PCI bus ID, as the kind's driver would publish them for the node at ``root``."""
    module, flags = DRIVERS[kind]
    profile = module.build_profile(module.build_parser().parse_args([*flags, *extra, f"-prefix={root}"]))
    return {d.name: str(d.attributes.get(STANDARD_PCI_BUS_ID, "")) for d in profile.scan().devices}


@pytest.mark.parametrize("kind", sorted(HOT_PLUG))
def test_a_hot_plugged_device_is_what_its_driver_publishes_and_unplugging_takes_it(
    kind: str, tmp_path: Path
) -> None:
    """The real-node test waits for the name and selects the PCI address that HOT_PLUG says: the
    kind's own driver, scanning the node with the device plugged, publishes exactly that."""
    build_node(parse_node_spec(KINDS_NODE_PROFILE, "KINDS_NODE_PROFILE"), tmp_path)
    before = _published(kind, tmp_path)
    plugged = HOT_PLUG[kind](FakeTree(tmp_path))
    assert plugged.kind == kind
    after = _published(kind, tmp_path)
    assert set(after) - set(before) == {plugged.device}, after
    assert after[plugged.device] == plugged.address
    plugged.unplug()
    assert _published(kind, tmp_path) == before


def test_the_nodes_qat_device_for_kernel_mode_is_not_the_dpdk_drivers(tmp_path: Path) -> None:
    """The DPDK-mode driver publishes the two VFs only; kernel mode publishes the process slots of
    the c6xx device's sections, from the node's adf_ctl and /etc."""
    tree = build_node(parse_node_spec(KINDS_NODE_PROFILE, "KINDS_NODE_PROFILE"), tmp_path)
    assert set(_published("qat", tmp_path)) == {"qatvf-0000-13-00-1", "qatvf-0000-13-00-2"}
    assert "qat_dev0 - type: c6xx" in run_command([str(tree.path(ADF_CTL)), "status"])
