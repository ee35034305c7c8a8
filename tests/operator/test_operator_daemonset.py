"""DaemonSet builders: per-kind args, images, init containers, volumes, security, selectors, resources."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator import images
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset, plugin_args
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.operator.kinds.qat import qat_pf_ids
from intel_device_plugins.operator.model import parse_spec

NS = "inteldeviceplugins-system"
ROOT = Path(__file__).resolve().parents[2]
STANDALONE_FPGA = ROOT / "deploy" / "fpga_plugin" / "base" / "intel-fpga-plugin.yaml"


def build(kind: DeviceKind, spec: dict[str, Any], secret: str = "") -> dict[str, Any]:
    parsed = parse_spec(kind, {"image": f"intel/intel-{kind.value}-plugin:0.36.0", **spec})
    return desired_daemonset(parsed, Owner(kind, "sample", "uid-1"), NS, secret)


def pod(ds: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ds["spec"]["template"]["spec"]
    return spec


def container(ds: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod(ds)["containers"]
    assert isinstance(c, dict)
    return c


def volumes(ds: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod(ds)["volumes"]}


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_common_shape(kind: DeviceKind) -> None:
    ds = build(kind, {})
    meta = ds["metadata"]
    assert meta["name"] == f"intel-{kind.value}-plugin-sample" and meta["namespace"] == NS
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "deviceplugin.intel.com/v1",
            "kind": kind.kind,
            "name": "sample",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    app = {"app": f"intel-{kind.value}-plugin"}
    assert ds["spec"]["selector"] == {"matchLabels": app}
    assert ds["spec"]["template"]["metadata"]["labels"] == app
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert pod(ds)["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert "tolerations" not in pod(ds) and "imagePullSecrets" not in pod(ds)
    c = container(ds)
    assert c["name"] == f"intel-{kind.value}-plugin"
    assert c["command"] == [f"intel_{kind.value}_device_plugin"]
    assert c["imagePullPolicy"] == "IfNotPresent"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ("seLinuxOptions" in sc) == (kind is not DeviceKind.DLB)
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["kubeletsockets"]["mountPath"] == "/var/lib/kubelet/device-plugins"
    assert set(mounts) <= set(volumes(ds))


@pytest.mark.parametrize(
    ("kind", "requests", "limits", "automount"),
    [
        (DeviceKind.DLB, ("48Mi", "40m"), ("96Mi", "100m"), False),
        (DeviceKind.DSA, ("48Mi", "50m"), ("96Mi", "100m"), False),
        (DeviceKind.FPGA, ("48Mi", "80m"), ("96Mi", "160m"), None),
        (DeviceKind.GPU, ("48Mi", "40m"), ("96Mi", "100m"), False),
        (DeviceKind.IAA, ("48Mi", "60m"), ("96Mi", "120m"), False),
        (DeviceKind.NPU, ("48Mi", "40m"), ("96Mi", "100m"), False),
        (DeviceKind.QAT, ("48Mi", "70m"), ("96Mi", "140m"), False),
        (DeviceKind.SGX, ("48Mi", "40m"), ("96Mi", "100m"), False),
    ],
)
def test_resources_and_token(
    kind: DeviceKind, requests: tuple[str, str], limits: tuple[str, str], automount: bool | None
) -> None:
    ds = build(kind, {})
    res = container(ds)["resources"]
    assert (res["requests"]["memory"], res["requests"]["cpu"]) == requests
    assert (res["limits"]["memory"], res["limits"]["cpu"]) == limits
    assert pod(ds).get("automountServiceAccountToken") == automount


@pytest.mark.parametrize(
    ("kind", "spec", "args"),
    [
        (DeviceKind.DLB, {"logLevel": 4}, ["-v", "4"]),
        (DeviceKind.DSA, {}, ["-v", "0", "-driver", "idxd", "-shared-dev-num", "1"]),
        (
            DeviceKind.DSA,
            {"driver": "vfio-pci", "sharedDevNum": 10},
            ["-v", "0", "-driver", "vfio-pci", "-shared-dev-num", "10"],
        ),
        (DeviceKind.FPGA, {}, ["-v", "0", "-mode", "af"]),
        (DeviceKind.FPGA, {"mode": "region"}, ["-v", "0", "-mode", "region"]),
        (DeviceKind.GPU, {}, ["-v", "0", "-shared-dev-num", "1", "-allocation-policy", "none"]),
        (
            DeviceKind.GPU,
            {
                "enableMonitoring": True,
                "monitoringMode": "split",
                "sharedDevNum": 10,
                "preferredAllocationPolicy": "packed",
                "allowIDs": "0x56a0",
                "bypathMode": "single",
            },
            [
                "-v",
                "0",
                "-enable-monitoring",
                "-monitoring-mode=split",
                "-shared-dev-num",
                "10",
                "-allocation-policy",
                "packed",
                "-allow-ids",
                "0x56a0",
                "-bypath",
                "single",
            ],
        ),
        (
            DeviceKind.GPU,
            {"denyIDs": "0x0bda"},
            ["-v", "0", "-shared-dev-num", "1", "-allocation-policy", "none", "-deny-ids", "0x0bda"],
        ),
        (DeviceKind.IAA, {"sharedDevNum": 3}, ["-v", "0", "-shared-dev-num", "3"]),
        (DeviceKind.NPU, {}, ["-v", "0", "-shared-dev-num", "1"]),
        (
            DeviceKind.QAT,
            {},
            [
                "-v",
                "0",
                "-dpdk-driver",
                "vfio-pci",
                "-kernel-vf-drivers",
                "c6xxvf,4xxxvf",
                "-max-num-devices",
                "32",
            ],
        ),
        (
            DeviceKind.QAT,
            {
                "dpdkDriver": "igb_uio",
                "kernelVfDrivers": ["4xxxvf", "420xxvf"],
                "maxNumDevices": 1,
                "preferredAllocationPolicy": "balanced",
            },
            [
                "-v",
                "0",
                "-dpdk-driver",
                "igb_uio",
                "-kernel-vf-drivers",
                "4xxxvf,420xxvf",
                "-max-num-devices",
                "1",
                "-allocation-policy",
                "balanced",
            ],
        ),
        (DeviceKind.SGX, {}, ["-v", "0", "-enclave-limit", "1", "-provision-limit", "1"]),
        (
            DeviceKind.SGX,
            {"enclaveLimit": 110, "provisionLimit": 20, "dcapInfraResources": True},
            ["-v", "0", "-enclave-limit", "110", "-provision-limit", "20", "-dcap-infra-resources"],
        ),
    ],
)
def test_args(kind: DeviceKind, spec: dict[str, Any], args: list[str]) -> None:
    assert plugin_args(parse_spec(kind, spec)) == args
    assert container(build(kind, spec))["args"] == args


def test_selector_tolerations_and_secret() -> None:
    tol = [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    ds = build(
        DeviceKind.GPU,
        {"nodeSelector": {"intel.feature.node.kubernetes.io/gpu": "true"}, "tolerations": tol},
        secret="pull",
    )
    assert pod(ds)["nodeSelector"] == {"intel.feature.node.kubernetes.io/gpu": "true"}
    assert pod(ds)["tolerations"] == tol
    assert pod(ds)["imagePullSecrets"] == [{"name": "pull"}]
    assert build(DeviceKind.GPU, {"tolerations": []})["spec"]["template"]["spec"]["tolerations"] == []


def test_env() -> None:
    gpu = {e["name"]: e for e in container(build(DeviceKind.GPU, {}))["env"]}
    assert gpu["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert gpu["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert "env" not in container(build(DeviceKind.SGX, {}))
    assert [e["name"] for e in container(build(DeviceKind.QAT, {}))["env"]] == ["NODE_NAME"]


def test_volume_details() -> None:
    sgx = volumes(build(DeviceKind.SGX, {}))
    assert sgx["sgx-enclave"]["hostPath"] == {"path": "/dev/sgx_enclave", "type": "CharDevice"}
    assert sgx["cdipath"]["hostPath"]["type"] == "DirectoryOrCreate"
    qat = {m["name"]: m for m in container(build(DeviceKind.QAT, {}))["volumeMounts"]}
    assert "readOnly" not in qat["pcidir"] and qat["devdir"]["readOnly"] is True
    dlb = container(build(DeviceKind.DLB, {}))
    assert dlb["terminationMessagePath"] == "/tmp/termination-log"


def test_dsa_vfio_mounts_vfio_on_both_sides() -> None:
    ds = build(DeviceKind.DSA, {"driver": "vfio-pci"})
    assert volumes(ds)["devfs"]["hostPath"]["path"] == "/dev/vfio"
    devfs = next(m for m in container(ds)["volumeMounts"] if m["name"] == "devfs")
    assert devfs["mountPath"] == "/dev/vfio"


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k is not DeviceKind.FPGA], ids=lambda k: k.value)
def test_no_init_container_without_init_image(kind: DeviceKind) -> None:
    assert "initContainers" not in pod(build(kind, {}))


INIT = "intel/intel-{}:0.36.0"


def init_of(ds: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod(ds)["initContainers"]
    assert isinstance(c, dict)
    return c


def test_fpga_always_has_init_container() -> None:
    c = init_of(build(DeviceKind.FPGA, {}))
    assert c["name"] == "intel-fpga-initcontainer" and c["image"] == images.node_image()
    assert c["command"] == ["intel_fpga_hook_install"]
    assert c["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["volumeMounts"] == [{"name": "intel-fpga-sw", "mountPath": "/opt/intel/fpga-sw"}]
    c2 = init_of(build(DeviceKind.FPGA, {"initImage": "mirror/intel-fpga-initcontainer:0.37.0"}))
    assert c2["image"] == "mirror/intel-fpga-initcontainer:0.37.0" and "command" not in c2
    mirrored = "reg.example/ours/intel-device-plugins-node:9.9.9"
    c3 = init_of(build(DeviceKind.FPGA, {"image": mirrored}))
    assert c3["image"] == mirrored and c3["command"] == ["intel_fpga_hook_install"]


def test_dlb_init() -> None:
    ds = build(DeviceKind.DLB, {"initImage": INIT.format("dlb-initcontainer")})
    c = init_of(ds)
    assert c["name"] == "enable-vfs"
    assert volumes(ds)["sysfs-driver-dlb2"]["hostPath"] == {
        "path": "/sys/bus/pci/drivers/dlb2",
        "type": "DirectoryOrCreate",
    }


def test_dsa_init_with_config() -> None:
    ds = build(
        DeviceKind.DSA,
        {
            "initImage": INIT.format("idxd-config-initcontainer"),
            "driver": "vfio-pci",
            "provisioningConfig": "intel-dsa-config",
        },
    )
    c = init_of(ds)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["DEVICE_TYPE"] == "dsa" and env["DSA_DRIVER"] == "vfio-pci" and "NODE_NAME" in env
    assert c["securityContext"]["seLinuxOptions"] == {"type": "container_device_plugin_init_t"}
    vols = volumes(ds)
    assert vols["intel-dsa-config-volume"] == {
        "name": "intel-dsa-config-volume",
        "configMap": {"name": "intel-dsa-config"},
    }
    assert vols["scratch"] == {"name": "scratch", "emptyDir": {}}
    assert {"sys-bus-dsa", "sys-bus-pci", "sys-devices"} <= set(vols)
    assert vols["sys-bus-pci"]["hostPath"] == {"path": "/sys/bus/pci/drivers"}


def test_iaa_init_has_no_pci_bus() -> None:
    ds = build(
        DeviceKind.IAA, {"initImage": INIT.format("idxd-config-initcontainer"), "provisioningConfig": "c"}
    )
    c = init_of(ds)
    assert c["name"] == "intel-iaa-initcontainer"
    assert {e["name"]: e.get("value") for e in c["env"]}["DEVICE_TYPE"] == "iaa"
    assert "sys-bus-pci" not in volumes(ds) and "intel-iaa-config-volume" in volumes(ds)


def test_qat_init() -> None:
    ds = build(
        DeviceKind.QAT,
        {
            "initImage": INIT.format("qat-initcontainer"),
            "provisioningConfig": "qat-config",
            "kernelVfDrivers": ["4xxxvf", "420xxvf"],
        },
    )
    c = init_of(ds)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ENABLED_QAT_PF_PCIIDS"] == "4940 4942 4944 4946"
    assert volumes(ds)["intel-qat-config-volume"]["configMap"] == {"name": "qat-config", "defaultMode": 0o440}
    assert volumes(ds)["sysfs"]["hostPath"] == {"path": "/sys/devices", "type": "Directory"}
    drivers = volumes(ds)["sysfs-pci-drivers"]["hostPath"]
    assert drivers == {"path": "/sys/bus/pci/drivers", "type": "Directory"}


def test_qat_pf_ids_order_and_unknowns() -> None:
    assert qat_pf_ids(["c3xxxvf", "dh895xccvf", "6xxxvf", "c4xxxvf"]) == "19e2 0434 0435 18a0"


@pytest.mark.parametrize(
    ("kind", "name", "volume"),
    [
        (DeviceKind.GPU, "intel-gpu-initcontainer", "nfd-sources"),
        (DeviceKind.SGX, "intel-sgx-initcontainer", "nfd-features"),
    ],
)
def test_nfd_init(kind: DeviceKind, name: str, volume: str) -> None:
    ds = build(kind, {"initImage": INIT.format(name)})
    c = init_of(ds)
    assert c["name"] == name
    assert volumes(ds)[volume]["hostPath"]["path"] == "/etc/kubernetes/node-feature-discovery/source.d/"


#: Every kind with each of its init containers present (FPGA always has one).
WITH_INIT = {
    DeviceKind.DLB: "dlb-initcontainer",
    DeviceKind.DSA: "idxd-config-initcontainer",
    DeviceKind.FPGA: "fpga-initcontainer",
    DeviceKind.GPU: "gpu-initcontainer",
    DeviceKind.IAA: "idxd-config-initcontainer",
    DeviceKind.QAT: "qat-initcontainer",
    DeviceKind.SGX: "sgx-initcontainer",
}


def assert_hardened(pod_spec: dict[str, Any]) -> None:
    """Every container and init container: no capability, no escalation, read-only root, default seccomp."""
    for c in [*pod_spec["containers"], *pod_spec.get("initContainers", [])]:
        sc = c["securityContext"]
        assert "privileged" not in sc, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_every_container_and_init_container_is_hardened(kind: DeviceKind) -> None:
    spec = {"initImage": INIT.format(WITH_INIT[kind])} if kind in WITH_INIT else {}
    ds = build(kind, spec)
    assert ("initContainers" in pod(ds)) == (kind in WITH_INIT)
    assert_hardened(pod(ds))


def test_fpga_lists_the_hook_directory_before_the_cdi_directory_as_upstream() -> None:
    names = [v["name"] for v in pod(build(DeviceKind.FPGA, {}))["volumes"]]
    assert names == ["devfs", "sysfs", "kubeletsockets", "intel-fpga-sw", "cdidir"]


def test_standalone_fpga_daemonset_matches_the_operators_volumes_and_hardening() -> None:
    (doc,) = (d for d in yaml.safe_load_all(STANDALONE_FPGA.read_text()) if d and d["kind"] == "DaemonSet")
    standalone, ours = doc["spec"]["template"]["spec"], pod(build(DeviceKind.FPGA, {}))
    assert standalone["volumes"] == ours["volumes"]
    assert standalone["initContainers"][0]["securityContext"] == ours["initContainers"][0]["securityContext"]
    assert_hardened(standalone)


def test_builder_is_deterministic() -> None:
    spec = {"nodeSelector": {"b": "2", "a": "1"}, "sharedDevNum": 3}
    assert build(DeviceKind.GPU, spec) == build(DeviceKind.GPU, spec)


SYSFS_WRITERS = [
    (DeviceKind.DLB, {"initImage": INIT.format("dlb-initcontainer")}),
    (DeviceKind.DSA, {"initImage": INIT.format("idxd-config-initcontainer")}),
    (DeviceKind.DSA, {"initImage": INIT.format("idxd-config-initcontainer"), "driver": "vfio-pci"}),
    (DeviceKind.IAA, {"initImage": INIT.format("idxd-config-initcontainer")}),
    (DeviceKind.QAT, {"initImage": INIT.format("qat-initcontainer"), "provisioningConfig": "qat-config"}),
]


@pytest.mark.parametrize(("kind", "spec"), SYSFS_WRITERS, ids=lambda v: getattr(v, "value", ""))
def test_sysfs_writing_init_containers_are_not_privileged(kind: DeviceKind, spec: dict[str, Any]) -> None:
    """No privileged init container, no capability, and never the whole of /sys."""
    ds = build(kind, spec)
    c = init_of(ds)
    sc = c["securityContext"]
    assert "privileged" not in sc
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    vols = volumes(ds)
    sys_mounts = {m["mountPath"] for m in c["volumeMounts"] if m["mountPath"].startswith("/sys")}
    allowed = {"/sys/devices", "/sys/bus/pci/drivers", "/sys/bus/pci/drivers/dlb2", "/sys/bus/dsa"}
    assert sys_mounts <= allowed, sys_mounts - allowed
    for m in c["volumeMounts"]:
        host = vols[m["name"]].get("hostPath", {}).get("path", "")
        assert host not in ("/sys", "/sys/bus/pci", "/"), (m, host)


def test_sysfs_writers_mount_exactly_what_their_scripts_write() -> None:
    def sys_paths(kind: DeviceKind, spec: dict[str, Any]) -> set[str]:
        return {m["mountPath"] for m in init_of(build(kind, spec))["volumeMounts"]} - {
            "/idxd-init/scratch",
            "/idxd-init/conf",
            "/qat-init/conf",
        }

    assert sys_paths(*SYSFS_WRITERS[0]) == {"/sys/devices", "/sys/bus/pci/drivers/dlb2"}
    assert sys_paths(*SYSFS_WRITERS[1]) == {"/sys/bus/dsa", "/sys/bus/pci/drivers", "/sys/devices"}
    assert sys_paths(*SYSFS_WRITERS[3]) == {"/sys/bus/dsa", "/sys/devices"}
    assert sys_paths(*SYSFS_WRITERS[4]) == {"/sys/devices", "/sys/bus/pci/drivers"}


@pytest.mark.parametrize("kind", [DeviceKind.GPU, DeviceKind.NPU], ids=lambda k: k.value)
def test_plugins_that_never_call_the_api_get_no_token(kind: DeviceKind) -> None:
    assert pod(build(kind, {}))["automountServiceAccountToken"] is False


def test_fpga_keeps_its_token_for_the_node_mode_annotation() -> None:
    assert "automountServiceAccountToken" not in pod(build(DeviceKind.FPGA, {}))


FPGA_SA = "intel-deviceplugins-fpga-plugin"


def test_fpga_runs_under_the_given_service_account() -> None:
    parsed = parse_spec(DeviceKind.FPGA, {})
    ds = desired_daemonset(
        parsed, Owner(DeviceKind.FPGA, "sample", "uid-1"), NS, fpga_service_account=FPGA_SA
    )
    assert pod(ds)["serviceAccountName"] == FPGA_SA


def test_without_a_service_account_fpga_keeps_the_namespace_default() -> None:
    assert "serviceAccountName" not in pod(build(DeviceKind.FPGA, {}))


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k is not DeviceKind.FPGA], ids=lambda k: k.value)
def test_other_kinds_never_get_the_fpga_service_account(kind: DeviceKind) -> None:
    parsed = parse_spec(kind, {"image": f"intel/intel-{kind.value}-plugin:0.36.0"})
    ds = desired_daemonset(parsed, Owner(kind, "sample", "uid-1"), NS, fpga_service_account=FPGA_SA)
    assert "serviceAccountName" not in pod(ds)


def test_dlb_sysfs_devices_volume_is_directory_or_create() -> None:
    ds = build(DeviceKind.DLB, {"initImage": INIT.format("dlb-initcontainer")})
    assert volumes(ds)["sysfs-devices"]["hostPath"] == {"path": "/sys/devices", "type": "DirectoryOrCreate"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, {"kubernetes.io/arch": "amd64"}),
        ({"a": "b"}, {"a": "b", "kubernetes.io/arch": "amd64"}),
        ({"kubernetes.io/arch": "arm64"}, {"kubernetes.io/arch": "amd64"}),
    ],
)
def test_iaa_always_selects_amd64(selector: dict[str, str], expected: dict[str, str]) -> None:
    assert pod(build(DeviceKind.IAA, {"nodeSelector": selector}))["nodeSelector"] == expected
    if selector:
        assert pod(build(DeviceKind.DSA, {"nodeSelector": selector}))["nodeSelector"] == selector


DRA_SA = "intel-deviceplugins-dra-driver"


def dra(spec: dict[str, Any], service_account: str = DRA_SA) -> dict[str, Any]:
    parsed = parse_spec(DeviceKind.GPU, {"image": images.node_image(), "deployAs": "DRADriver", **spec})
    return desired_daemonset(
        parsed, Owner(DeviceKind.GPU, "sample", "uid-1"), NS, dra_service_account=service_account
    )


def test_dra_driver_replaces_the_plugin_in_the_same_daemonset() -> None:
    plugin, driver = build(DeviceKind.GPU, {"image": images.node_image()}), dra({})
    # Same name, owner and labels: switching deployAs rolls the one DaemonSet over.
    assert driver["metadata"] == plugin["metadata"]
    assert driver["spec"]["selector"] == plugin["spec"]["selector"]
    c = container(driver)
    assert (c["name"], c["command"]) == ("intel-gpu-dra-driver", ["intel_gpu_dra_driver"])
    assert c["image"] == images.node_image()
    assert c["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ], "the pod UID gives each instance its own sockets, so a rolling update overlaps"
    assert pod(driver)["serviceAccountName"] == pod(driver)["serviceAccount"] == DRA_SA
    assert pod(driver)["automountServiceAccountToken"] is True


def test_dra_driver_rolls_with_a_surge_and_the_plugin_without() -> None:
    assert dra({})["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    plugin = build(DeviceKind.GPU, {"deployAs": "DevicePlugin"})
    assert plugin["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert container(plugin)["command"] == ["intel_gpu_device_plugin"]


def test_dra_driver_flags_name_the_directories_it_mounts() -> None:
    ds = dra({"logLevel": 3})
    c = container(ds)
    args = c["args"]
    assert args[:2] == ["-v", "3"]
    flags = dict(zip(args[2::2], args[3::2], strict=True))
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for name in ("-cdi-root", "-kubelet-registrar-directory-path", "-kubelet-plugins-directory-path"):
        assert flags[name] in mounts and not mounts[flags[name]].get("readOnly"), name
    assert {p for p, m in mounts.items() if m.get("readOnly")} == {"/sys", "/dev"}
    # runc creates the kubelet's termination-log file where the pod says (default /dev/termination-log);
    # below a read-only host mount it cannot, and the container never starts.
    log = c.get("terminationMessagePath", "/dev/termination-log")
    assert not any(log.startswith(f"{p}/") for p, m in mounts.items() if m.get("readOnly")), log
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert "privileged" not in sc and sc["readOnlyRootFilesystem"] is True
    assert {v["name"] for v in pod(ds)["volumes"]} == {m["name"] for m in c["volumeMounts"]}


def test_dra_driver_keeps_the_crs_selector_tolerations_and_nfd_hook() -> None:
    ds = dra(
        {
            "nodeSelector": {"gpu": "yes"},
            "tolerations": [{"operator": "Exists"}],
            "initImage": INIT.format("gpu-initcontainer"),
        }
    )
    assert pod(ds)["nodeSelector"] == {"gpu": "yes"}
    assert pod(ds)["tolerations"] == [{"operator": "Exists"}]
    (init,) = pod(ds)["initContainers"]
    assert init["name"] == "intel-gpu-initcontainer" and "nfd-sources" in volumes(ds)


def dra_of(kind: DeviceKind, spec: dict[str, Any]) -> dict[str, Any]:
    parsed = parse_spec(kind, {"image": images.node_image(), "deployAs": "DRADriver", **spec})
    return desired_daemonset(parsed, Owner(kind, "sample", "uid-1"), NS, dra_service_account=DRA_SA)


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_every_kind_deploys_its_dra_driver_in_the_plugins_daemonset(kind: DeviceKind) -> None:
    plugin, driver = build(kind, {"image": images.node_image()}), dra_of(kind, {"logLevel": 2})
    assert driver["metadata"] == plugin["metadata"]
    c = container(driver)
    assert (c["name"], c["command"]) == (f"intel-{kind.value}-dra-driver", [f"intel_{kind.value}_dra_driver"])
    assert c["args"][:2] == ["-v", "2"]
    port = int(c["args"][c["args"].index("-healthcheck-port") + 1])
    assert port == 51516, "Intel's DRA drivers' port"
    assert c["ports"] == [{"name": "healthcheck", "containerPort": port}]
    for probe in ("startupProbe", "livenessProbe"):
        assert c[probe]["grpc"] == {"port": port, "service": "liveness"}, probe
    assert pod(driver)["serviceAccountName"] == DRA_SA
    assert driver["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    writable = {p for p, m in mounts.items() if not m.get("readOnly")}
    own = {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
    assert writable == own | ({"/sys/bus/pci"} if kind is DeviceKind.QAT else set())
    names = [v["name"] for v in pod(driver)["volumes"]]
    assert len(names) == len(set(names)), names


def test_qat_driver_gets_the_plugins_device_flags_and_init_container_without_volume_clashes() -> None:
    ds = dra_of(
        DeviceKind.QAT,
        {"kernelVfDrivers": ["4xxxvf"], "maxNumDevices": 4, "initImage": INIT.format("qat-initcontainer")},
    )
    assert container(ds)["args"][10:] == [
        "-dpdk-driver",
        "vfio-pci",
        "-kernel-vf-drivers",
        "4xxxvf",
        "-max-num-devices",
        "4",
    ]
    (init,) = pod(ds)["initContainers"]
    by_name = volumes(ds)
    # The init container's /sys/devices volume would clash with the driver's /sys: it is renamed.
    init_mounts = {m["mountPath"]: by_name[m["name"]]["hostPath"]["path"] for m in init["volumeMounts"]}
    assert init_mounts["/sys/devices"] == "/sys/devices"
    assert by_name["sysfs"]["hostPath"]["path"] == "/sys"


def test_fpga_driver_installs_the_cri_hook_and_takes_the_mode() -> None:
    ds = dra_of(DeviceKind.FPGA, {"mode": "region"})
    assert container(ds)["args"][-2:] == ["-mode", "region"]
    (init,) = pod(ds)["initContainers"]
    assert init["command"] == ["intel_fpga_hook_install"] and init["image"] == images.node_image()
    assert volumes(ds)["intel-fpga-sw"]["hostPath"]["path"] == "/opt/intel/fpga-sw"
