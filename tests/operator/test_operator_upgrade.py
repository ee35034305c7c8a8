"""Image reference parsing, semver ordering, ``_SHA`` overrides and automatic upgrades (§1.6)."""

from __future__ import annotations

import pytest

from intel_device_plugins.operator.imageref import SemVerError, parse_image, parse_semver
from intel_device_plugins.operator.images import PLUGIN_IMAGE_VERSION
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import DsaSpec, NpuSpec, parse_spec
from intel_device_plugins.operator.upgrade import effective_image, effective_spec, sha_env_name

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "repo", "tag", "digest"),
    [
        ("intel/intel-gpu-plugin:0.36.0", "intel/intel-gpu-plugin", "0.36.0", ""),
        ("registry:5000/intel/intel-gpu-plugin:0.30.0", "registry:5000/intel/intel-gpu-plugin", "0.30.0", ""),
        ("registry:5000/intel/intel-gpu-plugin", "registry:5000/intel/intel-gpu-plugin", "", ""),
        (f"intel/intel-gpu-plugin@{DIGEST}", "intel/intel-gpu-plugin", "", DIGEST),
        (f"intel/intel-gpu-plugin:0.36.0@{DIGEST}", "intel/intel-gpu-plugin", "0.36.0", DIGEST),
    ],
)
def test_parse_image(image: str, repo: str, tag: str, digest: str) -> None:
    ref = parse_image(image)
    assert (ref.repository, ref.tag, ref.digest) == (repo, tag, digest)
    assert ref.name == "intel-gpu-plugin"


def test_semver_ordering() -> None:
    assert parse_semver("0.36.0") > parse_semver("0.36.0-rc1") > parse_semver("0.35.9")
    assert parse_semver("1.0.0") > parse_semver("0.99.99")
    assert parse_semver("0.36.0-rc.2") > parse_semver("0.36.0-rc.1")
    for bad in ("devel", "latest", "v0.36.0", "0.36", "01.2.3"):
        with pytest.raises(SemVerError):
            parse_semver(bad)


@pytest.mark.parametrize(
    ("image", "var"),
    [
        ("intel/intel-dsa-plugin:0.36.0", "INTEL_DSA_PLUGIN_SHA"),
        ("intel/intel-idxd-config-initcontainer:0.36.0", "INTEL_IDXD_CONFIG_INITCONTAINER_SHA"),
        (f"docker.io/intel/intel-sgx-plugin@{DIGEST}", "INTEL_SGX_PLUGIN_SHA"),
        ("host:5000/intel/intel-gpu-plugin:1.0.0", "INTEL_GPU_PLUGIN_SHA"),
        ("", None),
    ],
)
def test_sha_env_name(image: str, var: str | None) -> None:
    assert sha_env_name(image) == var


def test_sha_override_wins_over_user_input() -> None:
    pinned = f"docker.io/intel/intel-sgx-plugin@{DIGEST}"
    got = effective_image("intel/intel-sgx-plugin:0.40.0", {"INTEL_SGX_PLUGIN_SHA": pinned})
    assert got.image == pinned and "INTEL_SGX_PLUGIN_SHA" in got.reason
    same = effective_image(pinned, {"INTEL_SGX_PLUGIN_SHA": pinned})
    assert same.image == pinned and same.reason == ""


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("intel/intel-gpu-plugin:0.31.0", f"intel/intel-gpu-plugin:{PLUGIN_IMAGE_VERSION}"),
        (
            "host:5000/intel/intel-gpu-plugin:0.30.1",
            f"host:5000/intel/intel-gpu-plugin:{PLUGIN_IMAGE_VERSION}",
        ),
        ("intel/intel-gpu-plugin:0.40.0", "intel/intel-gpu-plugin:0.40.0"),
        ("intel/intel-gpu-plugin:devel", "intel/intel-gpu-plugin:devel"),
        ("intel/intel-gpu-plugin", "intel/intel-gpu-plugin"),
        (f"intel/intel-gpu-plugin:0.1.0@{DIGEST}", f"intel/intel-gpu-plugin:0.1.0@{DIGEST}"),
    ],
)
def test_automatic_upgrade(image: str, expected: str) -> None:
    assert effective_image(image, {}).image == expected


def test_effective_spec_covers_init_image_and_leaves_spec_alone() -> None:
    spec = parse_spec(
        DeviceKind.DSA,
        {
            "image": "intel/intel-dsa-plugin:0.30.0",
            "initImage": "intel/intel-idxd-config-initcontainer:0.36.0",
        },
    )
    assert isinstance(spec, DsaSpec)
    env = {"INTEL_IDXD_CONFIG_INITCONTAINER_SHA": f"intel/intel-idxd-config-initcontainer@{DIGEST}"}
    eff, reasons = effective_spec(spec, env)
    assert eff.image == f"intel/intel-dsa-plugin:{PLUGIN_IMAGE_VERSION}"
    assert eff.init_image == env["INTEL_IDXD_CONFIG_INITCONTAINER_SHA"]
    assert len(reasons) == 2
    assert spec.image == "intel/intel-dsa-plugin:0.30.0"


def test_npu_has_only_a_plugin_image() -> None:
    eff, reasons = effective_spec(NpuSpec(image="intel/intel-npu-plugin:0.36.0"), {})
    assert eff.image == "intel/intel-npu-plugin:0.36.0" and reasons == ()
