"""SGX resources, limits and flags."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceNode, Mount, default_allocation
from intel_device_plugins.plugins.sgx import cli
from intel_device_plugins.plugins.sgx.discovery import SgxLimits, pod_count, scan_sgx
from intel_device_plugins.plugins.sgx.plugin import SgxPlugin
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec


def node(root: Path, spec: str = "[[sgx]]\n") -> FakeTree:
    return build_node(parse_node_spec(spec), root)


@pytest.mark.parametrize(
    ("value", "cpus", "expected"),
    [(None, 8, 110), ("10", 8, 80), (" 3\n", 2, 6), ("lots", 8, 110), ("-2", 8, 110), ("0", 8, 110)],
)
def test_pod_count(value: str | None, cpus: int, expected: int) -> None:
    assert pod_count(value, cpus) == expected


def test_enclave_and_provision_with_their_limits(tmp_path: Path) -> None:
    node(tmp_path)
    discovery = scan_sgx(str(tmp_path), SgxLimits(enclave=3, provision=2))
    tree = discovery.tree
    assert set(tree) == {"enclave", "provision"}
    assert sorted(tree["enclave"]) == ["sgx-enclave-0", "sgx-enclave-1", "sgx-enclave-2"]
    assert sorted(tree["provision"]) == ["sgx-provision-0", "sgx-provision-1"]
    assert tree["enclave"]["sgx-enclave-1"].nodes == (
        DeviceNode(f"{tmp_path}/dev/sgx_enclave", f"{tmp_path}/dev/sgx_enclave", "rw"),
    )
    assert tree["provision"]["sgx-provision-0"].numa_nodes == ()
    assert discovery.problems == ()


def test_dcap_resources(tmp_path: Path) -> None:
    node(tmp_path)
    tree = scan_sgx(str(tmp_path), SgxLimits(enclave=1, provision=1, dcap_infra=True)).tree
    assert list(tree["qe"]) == ["qe-1"]
    assert list(tree["registration"]) == ["registration-1"]
    registration = tree["registration"]["registration-1"]
    assert [n.container_path for n in registration.nodes] == [
        f"{tmp_path}/dev/sgx_enclave",
        f"{tmp_path}/dev/sgx_provision",
    ]
    assert registration.cdi is not None
    assert registration.cdi.qualified_name == "intel.cdi.k8s.io/sgx=efivarfs"
    assert registration.cdi.mounts == (Mount("efivarfs", "/run/efivars", read_only=False),)
    assert registration.cdi.mount_type == "efivarfs"
    allocation = default_allocation(tree["registration"], ["registration-1"])
    assert allocation.cdi_devices == ("intel.cdi.k8s.io/sgx=efivarfs",)


@pytest.mark.parametrize("spec", ["[[sgx]]\nprovision = false\n", "[[sgx]]\nenclave = false\n", ""])
def test_missing_node_means_zero_devices_and_a_problem(tmp_path: Path, spec: str) -> None:
    node(tmp_path, spec)
    discovery = scan_sgx(str(tmp_path), SgxLimits(enclave=5, provision=5, dcap_infra=True))
    assert discovery.tree == {"enclave": {}, "provision": {}, "qe": {}, "registration": {}}
    assert "not found" in discovery.problems[0]


def test_plugin_rescans_and_notices_sgx_appearing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plugin = SgxPlugin(SgxLimits(enclave=4, provision=4), prefix=str(tmp_path))
    with caplog.at_level(logging.INFO):
        assert plugin.scan()["enclave"] == {}
        assert plugin.scan()["enclave"] == {}
        node(tmp_path)
        first = plugin.scan()
        assert len(first["enclave"]) == 4
        assert plugin.scan() is first
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    assert any(r.getMessage().startswith("resolved:") for r in caplog.records)


def test_flags_and_defaults() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["-enclave-limit", "20", "--dcap-infra-resources"])
    limits = cli.limits_from(args, {"PODS_PER_CORE": "4"}, cpus=16)
    assert limits == SgxLimits(enclave=20, provision=64, dcap_infra=True)
    defaults = cli.limits_from(parser.parse_args([]), {}, cpus=16)
    assert defaults == SgxLimits(enclave=110, provision=110, dcap_infra=False)
    assert parser.parse_args(["-dcap-infra-resources=false"]).dcap_infra_resources is False


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["-enclave-limit", "0"], "enclave-limit"),
        (["-provision-limit", "x"], "provision-limit"),
        (["-dcap-infra-resources=maybe"], "dcap-infra-resources"),
    ],
)
def test_malformed_flag_is_rejected_naming_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err
