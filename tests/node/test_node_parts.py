"""The pure parts of the real node: image archives, the merged /sys, configuration documents."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path

from intel_device_plugins.operator.kinds import DeviceKind
from k8stest.node import (
    CAP_SYS_RESOURCE,
    NodeConfig,
    NodeLayout,
    cgroup_mounts,
    containerd_configuration,
    has_capability,
    kubelet_configuration,
    merge_sysfs,
    renumber_char_links,
    workload_pod,
)
from k8stest.node.plugins import plugin_identity, sample_daemonset
from k8stest.node.runtime import bundle_dir, with_node_sysfs
from k8stest.node.trees import SIM_DEVICE_MAJOR, replace_with_char_device
from k8stest.ociimage import (
    PAUSE_IMAGE,
    WORKLOAD_IMAGE,
    busybox_images,
    localized_index,
    qualified_reference,
    write_oci_archive,
)


def _archive(tmp_path: Path, name: str) -> Path:
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF not really busybox")
    return write_oci_archive(busybox_images(busybox), tmp_path / name)


def test_oci_archive_is_reproducible_and_content_addressed(tmp_path: Path) -> None:
    first, second = _archive(tmp_path, "a.tar"), _archive(tmp_path, "b.tar")
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        members = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        blobs = {name: f.read() for name, f in members.items() if f is not None}
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(data).hexdigest()
    index = json.loads(blobs["index.json"])
    names = [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]]
    assert names == [WORKLOAD_IMAGE, PAUSE_IMAGE]
    # Both images share one layer, stored once.
    manifests = [json.loads(blobs[f"blobs/sha256/{m['digest'].split(':')[1]}"]) for m in index["manifests"]]
    assert len({m["layers"][0]["digest"] for m in manifests}) == 1
    layer = blobs[f"blobs/sha256/{manifests[0]['layers'][0]['digest'].split(':')[1]}"]
    config = json.loads(blobs[f"blobs/sha256/{manifests[1]['config']['digest'].split(':')[1]}"])
    raw = gzip.decompress(layer)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()]
    assert config["config"]["Cmd"][0] == "/bin/sleep"
    with tarfile.open(fileobj=io.BytesIO(raw)) as layer_tar:
        entries = {m.name: m for m in layer_tar.getmembers()}
    assert entries["bin/busybox"].isfile() and entries["bin/sh"].linkname == "busybox"
    assert entries["tmp"].mode == 0o1777


def _tree(root: Path, files: dict[str, str], links: dict[str, str] | None = None) -> Path:
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    for rel, target in (links or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(target)
    return root


def test_merged_sysfs_prefers_the_simulation_except_host_owned_paths(tmp_path: Path) -> None:
    real = _tree(
        tmp_path / "real",
        {
            "class/net/lo/mtu": "65536",
            "class/drm/version": "host",
            "devices/system/cpu/online": "0-1",
            "fs/cgroup/marker": "",
            "kernel/mm/x": "",
        },
        {"bus/pci/devices/0000:00:01.0": "../../../devices/pci0000:00/0000:00:01.0"},
    )
    staging = _tree(
        tmp_path / "staging",
        {
            "class/drm/card0/dev": "226:0",
            "class/drm/version": "sim",
            "devices/system/node/node1/cpulist": "4-7",
        },
        {"bus/pci/devices/0000:10:00.0": "../../../devices/pci0000:10/0000:10:00.0"},
    )
    binds = merge_sysfs(staging, real)
    targets = {Path(b.target).relative_to(staging).as_posix(): Path(b.source) for b in binds}
    # Real entries the simulation lacks become mount points, filled from the host.
    assert targets["class/net"] == real / "class/net"
    assert targets["fs"] == real / "fs"
    assert targets["kernel"] == real / "kernel"
    # In a directory both have, real symlinks are copied (not mounted) next to the simulated ones.
    assert (staging / "bus/pci/devices/0000:00:01.0").is_symlink()
    assert (staging / "bus/pci/devices/0000:10:00.0").is_symlink()
    assert not any(t.startswith("bus/pci/devices") for t in targets)
    # Where both have a file, the simulation wins; its own entries stay.
    assert "class/drm/version" not in targets
    assert (staging / "class/drm/version").read_text() == "sim"
    assert (staging / "class/drm/card0/dev").read_text() == "226:0"
    # The host's CPU topology replaces the simulation's (the kubelet reads it).
    assert targets["devices/system"] == real / "devices/system"
    assert not (staging / "devices/system/node").exists()


def test_merged_sysfs_keeps_the_simulated_iommu_groups_and_debugfs_below_the_hosts_kernel(
    tmp_path: Path,
) -> None:
    """A VF's iommu_group link leads into /sys/kernel: the simulation's groups must be there."""
    real = _tree(
        tmp_path / "real",
        {"kernel/mm/x": "", "kernel/iommu_groups/7/type": "host", "kernel/debug/host": ""},
    )
    staging = _tree(
        tmp_path / "staging",
        {
            "kernel/iommu_groups/0/devices/.keep": "",
            "kernel/debug/qat_4xxx_0000:13:00.0/dev_cfg": "[GENERAL]",
            "kernel/other": "sim",
        },
    )
    binds = merge_sysfs(staging, real)
    targets = {Path(b.target).relative_to(staging).as_posix(): Path(b.source) for b in binds}
    # The simulation's device views replace the host's whole ...
    assert (staging / "kernel/iommu_groups/0/devices").is_dir()
    assert (staging / "kernel/debug/qat_4xxx_0000:13:00.0/dev_cfg").read_text() == "[GENERAL]"
    assert not (staging / "kernel/iommu_groups/7").exists()
    assert not (staging / "kernel/debug/host").exists()
    assert not any(t.startswith(("kernel/iommu_groups", "kernel/debug")) for t in targets)
    # ... and everything else of /sys/kernel is still the host's.
    assert targets["kernel/mm"] == real / "kernel/mm"
    assert not (staging / "kernel/other").exists()


def test_merged_sysfs_adds_the_simulated_epc_size_to_the_hosts_numa_nodes(tmp_path: Path) -> None:
    """sgx_epchook reads /sys/devices/system/node/nodeN/x86/sgx_total_bytes: below the host's
    topology, only that directory comes from the simulation, and only for NUMA nodes the host has."""
    real = _tree(
        tmp_path / "real",
        {
            "devices/system/cpu/online": "0-1",
            "devices/system/node/online": "0",
            "devices/system/node/node0/cpulist": "0-1",
        },
        {"devices/system/node/node0/cpu0": "../../cpu/cpu0"},
    )
    staging = _tree(
        tmp_path / "staging",
        {
            "devices/system/node/node0/cpulist": "0-3",
            "devices/system/node/node0/x86/sgx_total_bytes": "268435456",
            "devices/system/node/node1/cpulist": "4-7",
            "devices/system/node/node1/x86/sgx_total_bytes": "268435456",
        },
    )
    binds = merge_sysfs(staging, real)
    targets = {Path(b.target).relative_to(staging).as_posix(): Path(b.source) for b in binds}
    assert (staging / "devices/system/node/node0/x86/sgx_total_bytes").read_text() == "268435456"
    # The host's topology: its CPUs, its node list, node0's cpulist; no node1, which the host lacks.
    assert targets == {
        "devices/system/cpu": real / "devices/system/cpu",
        "devices/system/node/online": real / "devices/system/node/online",
        "devices/system/node/node0/cpulist": real / "devices/system/node/node0/cpulist",
    }
    assert (staging / "devices/system/node/node0/cpu0").is_symlink()
    assert not (staging / "devices/system/node/node1").exists()


def test_merged_sysfs_without_simulated_kernel_entries_takes_the_hosts_kernel_whole(tmp_path: Path) -> None:
    real = _tree(tmp_path / "real", {"kernel/iommu_groups/7/type": "host"})
    staging = _tree(tmp_path / "staging", {"kernel/other": "sim"})
    binds = merge_sysfs(staging, real)
    assert [(Path(b.target).relative_to(staging).as_posix(), Path(b.source)) for b in binds] == [
        ("kernel", real / "kernel")
    ]


def test_char_links_are_named_after_the_device_they_lead_to(tmp_path: Path) -> None:
    """udev's /dev/char/<major>:<minor> follows the node's numbers once simulated nodes are real."""
    char = tmp_path / "char"
    char.mkdir()
    (char / "238:0").symlink_to("/dev/null")  # a character device: 1:3
    (char / "238:1").symlink_to("../missing")  # dangling: left alone
    (char / "5:0").symlink_to(tmp_path)  # not a character device: left alone
    renumber_char_links(char)
    assert sorted(p.name for p in char.iterdir()) == ["1:3", "238:1", "5:0"]
    assert (char / "1:3").readlink() == Path("/dev/null")


def test_a_plain_node_becomes_a_char_device_with_its_link_renamed_before_it_appears(tmp_path: Path) -> None:
    """The node replaces the plain file in one rename, its udev link already carrying the new
    numbers: a driver woken by the rename never sees a node whose link names other numbers."""
    dev = tmp_path / "dev"
    (dev / "dsa").mkdir(parents=True)
    (dev / "char").mkdir()
    node = dev / "dsa" / "wq2.0"
    node.write_text("")
    (dev / "char" / "238:128").symlink_to("../dsa/wq2.0")
    (dev / "char" / "238:0").symlink_to("../dsa/wq0.0")  # another node's: left alone
    replace_with_char_device(node, 7, dev / "char", tmp_path / "staging")
    assert stat.S_ISCHR(node.lstat().st_mode)
    assert (os.major(node.lstat().st_rdev), os.minor(node.lstat().st_rdev)) == (SIM_DEVICE_MAJOR, 7)
    assert sorted(p.name for p in (dev / "char").iterdir()) == ["238:0", f"{SIM_DEVICE_MAJOR}:7"]
    assert os.readlink(dev / "char" / f"{SIM_DEVICE_MAJOR}:7") == "../dsa/wq2.0"
    assert not list((tmp_path / "staging").iterdir())


def test_capability_bits_are_read_from_proc_status() -> None:
    with_resource = "Name:\tx\nCapEff:\t000001ffffffffff\n"
    without = "CapEff:\t000001fffeffffff\n"
    assert has_capability(with_resource, CAP_SYS_RESOURCE)
    assert not has_capability(without, CAP_SYS_RESOURCE)
    assert not has_capability("no caps line", CAP_SYS_RESOURCE)


def test_containerd_clamps_oom_scores_only_without_cap_sys_resource(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path, "/k8stest-x")
    kwargs = {"cni_bin_dir": Path("/usr/lib/cni"), "pause_image": PAUSE_IMAGE}
    assert "restrict_oom_score_adj = false" in containerd_configuration(NodeConfig(), layout, **kwargs)  # type: ignore[arg-type]
    clamped = containerd_configuration(NodeConfig(), layout, can_lower_oom_score=False, **kwargs)  # type: ignore[arg-type]
    assert "restrict_oom_score_adj = true" in clamped
    assert f'address = "{tmp_path / "containerd.sock"}"' in clamped
    assert f'BinaryName = "{tmp_path / "runtime"}"' in clamped


def test_containerd_2_reads_cdi_specs_from_the_standard_directories(tmp_path: Path) -> None:
    text = containerd_configuration(
        NodeConfig(),
        NodeLayout(tmp_path, "/k8stest-x"),
        cni_bin_dir=Path("/usr/lib/cni"),
        pause_image=PAUSE_IMAGE,
    )
    assert text.startswith("version = 3\n")
    assert 'cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in text
    assert f'sandbox = "{PAUSE_IMAGE}"' in text
    assert 'bin_dirs = ["/usr/lib/cni"]' in text


def test_cgroup_mounts_lists_only_cgroup_hierarchies() -> None:
    mountinfo = "\n".join(
        [
            "30 25 0:26 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw",
            "31 30 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
            "32 30 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
            "33 25 0:29 / /proc rw - proc proc rw",
        ]
    )
    assert cgroup_mounts(mountinfo) == [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified")]


def test_kubelet_configuration_keeps_the_node_to_itself(tmp_path: Path) -> None:
    doc = kubelet_configuration(
        NodeConfig(), NodeLayout(tmp_path, "/k8stest-x"), ca_file=tmp_path / "ca.crt", port=1, healthz_port=2
    )
    assert doc["failCgroupV1"] is False
    assert "cgroupDriver" not in doc  # containerd 2 reports its own through the CRI
    assert doc["cgroupRoot"] == "/k8stest-x"
    assert doc["address"] == NodeConfig().node_ip  # inside the node's own network namespace
    assert doc["healthzBindAddress"] == "127.0.0.1"
    assert doc["readOnlyPort"] == 0
    assert doc["makeIPTablesUtilChains"] is False
    assert doc["authentication"]["anonymous"]["enabled"] is False
    assert doc["registerWithTaints"] == []


def test_workload_pod_leaves_placement_to_the_scheduler() -> None:
    pod = workload_pod("p", "node-a", "true", limits={"example.com/x": "1"}, host_paths={"/h": "/dev"})
    spec = pod["spec"]
    assert "nodeName" not in spec
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert container["resources"]["limits"] == {"example.com/x": "1"}
    assert spec["volumes"][0]["hostPath"]["path"] == "/dev"
    assert container["volumeMounts"][0]["mountPath"] == "/h"


def test_runtime_wrapper_gives_containers_the_nodes_sysfs() -> None:
    spec = {
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro"]},
        ]
    }
    mounts = with_node_sysfs(spec)["mounts"]
    assert mounts[0] == spec["mounts"][0] and mounts[2] == spec["mounts"][2]
    assert mounts[1] == {
        "destination": "/sys",
        "type": "bind",
        "source": "/sys",
        "options": ["rbind", "nosuid", "noexec", "nodev", "ro"],
    }
    assert bundle_dir(["--root", "/r", "create", "--bundle", "/b", "id"]) == Path("/b")
    assert bundle_dir(["create", "--bundle=/c", "id"]) == Path("/c")


def test_unqualified_image_names_are_imported_under_localhost() -> None:
    assert qualified_reference("project/image:1") == "localhost/project/image:1"
    assert qualified_reference("localhost/k8stest/busybox:1") == "localhost/k8stest/busybox:1"
    assert qualified_reference("registry.example:5000/p/i:1") == "registry.example:5000/p/i:1"
    index = {
        "manifests": [{"digest": "sha256:x", "annotations": {"org.opencontainers.image.ref.name": "p/i:1"}}]
    }
    (manifest,) = localized_index(index)["manifests"]
    assert manifest["annotations"]["io.containerd.image.name"] == "localhost/p/i:1"
    assert manifest["digest"] == "sha256:x"
    tag_only = {"manifests": [{"annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
    assert localized_index(tag_only) == tag_only


def test_fpga_sample_daemonset_uses_the_given_image_for_its_init_container_and_the_installs_account() -> None:
    """The sample names the node image unqualified for initImage too; a node would pull that name."""
    image = "localhost/intel-device-plugins/intel-device-plugins-node:0.1.0"
    spec, ds = sample_daemonset(DeviceKind.FPGA, image)
    pod = ds["spec"]["template"]["spec"]
    assert spec["initImage"] == image
    assert [c["image"] for c in pod["initContainers"] + pod["containers"]] == [image, image]
    (account,) = [o for o in plugin_identity(DeviceKind.FPGA, "plugins") if o["kind"] == "ServiceAccount"]
    assert account["metadata"] == {"name": "intel-deviceplugins-fpga-plugin", "namespace": "plugins"}
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_fpga_plugin_identity_binds_its_account_to_getting_nodes_only() -> None:
    objects = {o["kind"]: o for o in plugin_identity(DeviceKind.FPGA, "plugins")}
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    assert objects["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "intel-deviceplugins-fpga-plugin", "namespace": "plugins"}
    ]
    assert plugin_identity(DeviceKind.GPU) == []
    _, gpu = sample_daemonset(DeviceKind.GPU, "localhost/x:1")
    assert "serviceAccountName" not in gpu["spec"]["template"]["spec"]
