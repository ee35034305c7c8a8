"""SGX as DRA devices: the enclave device with EPC as consumable capacity."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.model import AllocatedDevice
from intel_device_plugins.plugins.sgx.dra import EPC_CAPACITY, SGX_DEVICE_CLASSES, SgxDriverProfile
from tests.builders import two_socket_node as node


def test_the_enclave_device_carries_the_sum_of_the_numa_nodes_epc(tmp_path: Path) -> None:
    node(tmp_path, "[[sgx]]\nepc_bytes_per_node = 1073741824\n")
    inventory = SgxDriverProfile(str(tmp_path)).scan()
    assert inventory.problems == ()
    devices = inventory.by_name()
    assert sorted(devices) == ["enclave", "provision"]
    epc = devices["enclave"].capacity[EPC_CAPACITY]
    assert epc.value == "2Gi"
    assert epc.request_policy is not None and epc.request_policy.valid_range_step == "4Ki"
    assert all(device.allow_multiple_allocations for device in devices.values())
    provision_capacity = {name: c.value for name, c in devices["provision"].capacity.items()}
    assert provision_capacity == {"epc": "0"}, "no EPC of its own"
    assert devices["enclave"].cdi is not None
    assert devices["enclave"].cdi.nodes[0].host_path == f"{tmp_path}/dev/sgx_enclave"


def test_no_devices_without_the_driver_or_without_epc(tmp_path: Path) -> None:
    node(tmp_path / "bare", "")
    bare = SgxDriverProfile(str(tmp_path / "bare")).scan()
    assert bare.devices == () and "sgx_enclave" in bare.problems[0]
    node(tmp_path / "no-epc", "[[sgx]]\nepc_bytes_per_node = 0\n")
    no_epc = SgxDriverProfile(str(tmp_path / "no-epc")).scan()
    assert no_epc.devices == () and "EPC size is unknown" in no_epc.problems[0]


def test_claims_get_the_device_nodes_they_were_allocated(tmp_path: Path) -> None:
    node(tmp_path, "[[sgx]]\n")
    profile = SgxDriverProfile(str(tmp_path))
    devices = profile.scan().by_name()
    (edit,) = profile.claim_edits("u1", [(AllocatedDevice("epc", "n", "enclave"), devices["enclave"])])
    assert edit.qualified_name == "k8s.sgx.intel.com/claim=u1-enclave"
    assert [n.container_path for n in edit.nodes] == [f"{tmp_path}/dev/sgx_enclave"]


def test_enclave_and_provision_map_their_extended_resources_and_epc_does_not() -> None:
    classes = {spec.name: device_class(spec) for spec in SGX_DEVICE_CLASSES}
    mapped = {c["spec"].get("extendedResourceName") for c in classes.values()}
    assert mapped == {None, "sgx.intel.com/enclave", "sgx.intel.com/provision"}
    enclave = classes["enclave.sgx.intel.com"]["spec"]["selectors"][0]["cel"]["expression"]
    assert enclave.startswith('device.driver == "sgx.intel.com" && (')
