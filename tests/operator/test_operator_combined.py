"""The one-process-per-node DaemonSet: union of the per-kind pods, arguments the combined process accepts."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator.combined import (
    COMBINED_NAME,
    Member,
    combined_args,
    combined_daemonset,
    combined_dra_daemonset,
    served_members,
)
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.plugins import combined as combined_process
from tests.operator.test_operator_daemonset import assert_hardened

UPSTREAM_SAMPLES = Path(__file__).parent / "data" / "upstream_sample_daemonsets.yaml"
NS = "inteldeviceplugins-system"
SEVEN = [k for k in DeviceKind if k is not DeviceKind.FPGA]


def sample_member(kind: DeviceKind) -> Member:
    """Upstream's sample CR of ``kind`` (with init images, unlike this project's samples)."""
    body = yaml.safe_load(UPSTREAM_SAMPLES.read_text())["samples"][kind.value]
    return Member(parse_spec(kind, body["spec"]), Owner(kind, body["metadata"]["name"], f"uid-{kind.value}"))


def pod(ds: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def test_one_daemonset_owned_by_every_cr_without_a_controller() -> None:
    members = [sample_member(k) for k in SEVEN]
    ds = combined_daemonset(members, NS)
    assert ds["metadata"]["name"] == COMBINED_NAME and ds["metadata"]["namespace"] == NS
    refs = ds["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == [m.owner.name for m in members]
    assert all(r["controller"] is False and r["blockOwnerDeletion"] is False for r in refs)
    (container,) = pod(ds)["containers"]
    assert container["command"] == ["intel_device_plugins"]
    assert container["resources"]["limits"]["memory"] == "128Mi"


def test_every_kinds_mounts_and_init_containers_are_there() -> None:
    members = [sample_member(k) for k in SEVEN]
    ds = combined_daemonset(members, NS)
    (container,) = pod(ds)["containers"]
    paths = [m["mountPath"] for m in container["volumeMounts"]]
    assert len(paths) == len(set(paths))
    volumes = {v["name"]: v for v in pod(ds)["volumes"]}
    inits = pod(ds)["initContainers"]
    used = {m["name"] for c in [container, *inits] for m in c["volumeMounts"]}
    assert used == set(volumes)
    for member in members:
        single = pod(desired_daemonset(member.spec, member.owner, NS))
        (own,) = single["containers"]
        single_volumes = {v["name"]: v for v in single["volumes"]}
        for mount in own["volumeMounts"]:
            combined_mount = next(
                m for m in container["volumeMounts"] if m["mountPath"] == mount["mountPath"]
            )
            host = volumes[combined_mount["name"]].get("hostPath")
            assert host == single_volumes[mount["name"]].get("hostPath"), mount
            if not mount.get("readOnly"):
                assert not combined_mount.get("readOnly"), mount
        for init in single.get("initContainers") or ():
            assert init["name"] in {c["name"] for c in inits}
    env = {e["name"] for e in container["env"]}
    assert env == {"NODE_NAME", "HOST_IP"}
    assert pod(ds)["automountServiceAccountToken"] is False


def test_a_node_is_selected_when_any_crs_selector_matches() -> None:
    members = [sample_member(DeviceKind.GPU), sample_member(DeviceKind.IAA)]
    terms = pod(combined_daemonset(members, NS))["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "intel.feature.node.kubernetes.io/gpu", "operator": "In", "values": ["true"]}
            ]
        },
        {
            "matchExpressions": [
                {"key": "intel.feature.node.kubernetes.io/iaa", "operator": "In", "values": ["true"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            ]
        },
    ]
    assert "nodeSelector" not in pod(combined_daemonset(members, NS))


def test_fpga_keeps_the_token() -> None:
    members = [sample_member(DeviceKind.GPU), sample_member(DeviceKind.FPGA)]
    assert "automountServiceAccountToken" not in pod(combined_daemonset(members, NS))


def test_the_fpga_service_account_is_used_only_when_fpga_is_a_member() -> None:
    sa = "intel-deviceplugins-fpga-plugin"
    with_fpga = [sample_member(DeviceKind.GPU), sample_member(DeviceKind.FPGA)]
    without = [sample_member(DeviceKind.GPU), sample_member(DeviceKind.QAT)]
    assert pod(combined_daemonset(with_fpga, NS, fpga_service_account=sa))["serviceAccountName"] == sa
    assert "serviceAccountName" not in pod(combined_daemonset(without, NS, fpga_service_account=sa))


def test_one_cr_per_kind_is_served() -> None:
    spec = parse_spec(DeviceKind.GPU, {})
    a, b = Member(spec, Owner(DeviceKind.GPU, "b", "1")), Member(spec, Owner(DeviceKind.GPU, "a", "2"))
    qat = sample_member(DeviceKind.QAT)
    served, skipped = served_members([a, qat, b])
    assert [m.owner.name for m in served] == ["a", qat.owner.name]
    assert skipped == [(a, b)]


@pytest.mark.parametrize("kind", SEVEN, ids=lambda k: k.value)
def test_arguments_parse_in_the_combined_process(kind: DeviceKind) -> None:
    args = combined_args([sample_member(kind).spec])
    parsed = combined_process.build_parser().parse_args(args)
    assert parsed.verbosity == 4
    (spec,) = parsed.plugin
    words = shlex.split(spec)
    assert words[0] == kind.value
    module = importlib.import_module(combined_process.KINDS[kind.value])
    module.build_parser().parse_args(words[1:])  # exits on an unknown flag


def test_no_member_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        combined_daemonset([], NS)


def test_every_container_and_init_container_of_the_combined_pod_is_hardened() -> None:
    ds = combined_daemonset([sample_member(k) for k in DeviceKind], NS)
    assert {c["name"] for c in pod(ds)["initContainers"]} >= {
        "intel-fpga-initcontainer",
        "intel-sgx-initcontainer",
        "enable-vfs",
    }
    assert_hardened(pod(ds))


def dra_member(kind: DeviceKind, **spec: Any) -> Member:
    """Upstream's sample CR of ``kind`` turned into a DRA driver CR (its plugin-only fields dropped)."""
    body = dict(yaml.safe_load(UPSTREAM_SAMPLES.read_text())["samples"][kind.value]["spec"])
    for field in ("sharedDevNum", "preferredAllocationPolicy", "enclaveLimit", "provisionLimit"):
        body.pop(field, None)
    body.update(image="intel-device-plugins/intel-device-plugins-node:0.1.0", deployAs="DRADriver", **spec)
    return Member(parse_spec(kind, body), Owner(kind, f"{kind.value}-dra", f"uid-{kind.value}"))


def test_dra_drivers_share_one_process_with_each_kinds_flags_and_rights() -> None:
    members = [
        dra_member(DeviceKind.QAT),
        dra_member(DeviceKind.FPGA, mode="region"),
        dra_member(DeviceKind.SGX),
    ]
    ds = combined_dra_daemonset(members, NS, dra_service_account="dra-sa")
    spec = pod(ds)
    (container,) = spec["containers"]
    args = container["args"]
    assert args.count("-cdi-root") == 1, "the shared flags are given once"
    port = int(args[args.index("-healthcheck-port") + 1])
    assert (
        container["livenessProbe"]["grpc"]
        == container["startupProbe"]["grpc"]
        == {
            "port": port,
            "service": "liveness",
        }
    ), "one process, one liveness service for all its drivers"
    drivers = [shlex.split(args[i + 1]) for i, a in enumerate(args) if a == "--driver"]
    assert [d[0] for d in drivers] == ["qat", "fpga", "sgx"]
    assert drivers[1][1:] == ["-mode", "region"]
    assert "-dpdk-driver" in drivers[0]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
        "/sys/bus/pci",
    }
    names = [v["name"] for v in spec["volumes"]]
    assert len(names) == len(set(names))
    assert {i["name"] for i in spec["initContainers"]} >= {
        "intel-fpga-initcontainer",
        "intel-qat-initcontainer",
    }
    assert spec["serviceAccountName"] == "dra-sa" and spec["automountServiceAccountToken"] is True
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert [e["name"] for e in container["env"]] == ["NODE_NAME", "POD_UID"]
    assert_hardened(spec)


def test_no_dra_member_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        combined_dra_daemonset([], NS)
