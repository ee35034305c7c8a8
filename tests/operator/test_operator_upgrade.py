"""Image reference parsing, semver ordering, ``_SHA`` overrides and automatic upgrades."""

from __future__ import annotations

import pytest

from intel_device_plugins.operator import images
from intel_device_plugins.operator.imageref import SemVerError, parse_image, parse_semver
from intel_device_plugins.operator.images import PLUGIN_IMAGE_ENV, PROJECT_VERSION, UPSTREAM_VERSION
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.kinds.dsa import DsaSpec
from intel_device_plugins.operator.kinds.npu import NpuSpec
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.operator.upgrade import ImageDecision, effective_image, effective_spec, sha_env_name

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
        (f"mirror.example/intel/intel-sgx-plugin@{DIGEST}", "INTEL_SGX_PLUGIN_SHA"),
        ("host:5000/intel/intel-gpu-plugin:1.0.0", "INTEL_GPU_PLUGIN_SHA"),
        ("", None),
    ],
)
def test_sha_env_name(image: str, var: str | None) -> None:
    assert sha_env_name(image) == var


def test_sha_override_wins_over_user_input() -> None:
    pinned = f"mirror.example/intel/intel-sgx-plugin@{DIGEST}"
    got = effective_image("intel/intel-sgx-plugin:0.40.0", {"INTEL_SGX_PLUGIN_SHA": pinned})
    assert got.image == pinned and "INTEL_SGX_PLUGIN_SHA" in got.reason
    same = effective_image(pinned, {"INTEL_SGX_PLUGIN_SHA": pinned})
    assert same.image == pinned and same.reason == ""


OURS = images.node_image()
CONFIGURED = "registry.example:5000/team/intel-device-plugins-node:" + PROJECT_VERSION
GPU = ("intel-gpu-plugin",)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        # upstream's plugin image up to the release this project replaces: our plugin image
        ("intel/intel-gpu-plugin:0.31.0", OURS),
        (f"intel/intel-gpu-plugin:{UPSTREAM_VERSION}", OURS),
        ("host:5000/intel/intel-gpu-plugin:0.30.1", OURS),
        # newer upstream, non-semver tags and digests: deployed as written
        ("intel/intel-gpu-plugin:0.40.0", "intel/intel-gpu-plugin:0.40.0"),
        ("intel/intel-gpu-plugin:devel", "intel/intel-gpu-plugin:devel"),
        ("intel/intel-gpu-plugin", "intel/intel-gpu-plugin"),
        (f"intel/intel-gpu-plugin:0.1.0@{DIGEST}", f"intel/intel-gpu-plugin:0.1.0@{DIGEST}"),
        # another kind's upstream name is no plugin of this kind: only the minimum-version rule applies
        ("intel/intel-qat-plugin:0.31.0", f"intel/intel-qat-plugin:{UPSTREAM_VERSION}"),
        # our node image: older or equal versions follow the operator, newer ones stay
        (OURS, OURS),
        ("elsewhere/intel-device-plugins-node:0.0.1", OURS),
        (
            "intel-device-plugins/intel-device-plugins-node:999.0.0",
            "intel-device-plugins/intel-device-plugins-node:999.0.0",
        ),
    ],
)
def test_automatic_upgrade(image: str, expected: str) -> None:
    assert effective_image(image, {}, GPU).image == expected


def test_configured_plugin_image_replaces_the_defaults() -> None:
    env = {PLUGIN_IMAGE_ENV: CONFIGURED}
    for requested in (OURS, "intel/intel-gpu-plugin:0.36.0"):
        got = effective_image(requested, env, GPU)
        assert got.image == CONFIGURED and requested in got.reason
    assert effective_image(CONFIGURED, env, GPU) == ImageDecision(CONFIGURED)


def test_empty_spec_image_gets_the_plugin_image() -> None:
    eff, _ = effective_spec(NpuSpec(image=""), {PLUGIN_IMAGE_ENV: CONFIGURED})
    assert eff.image == CONFIGURED


def test_effective_spec_covers_init_image_and_leaves_spec_alone() -> None:
    spec = parse_spec(
        DeviceKind.DSA,
        {
            "image": "intel/intel-dsa-plugin:0.30.0",
            "initImage": "intel/intel-idxd-config-initcontainer:0.30.0",
        },
    )
    assert isinstance(spec, DsaSpec)
    eff, reasons = effective_spec(spec, {})
    assert eff.image == OURS
    assert eff.init_image == f"intel/intel-idxd-config-initcontainer:{UPSTREAM_VERSION}"
    assert len(reasons) == 2
    env = {"INTEL_IDXD_CONFIG_INITCONTAINER_SHA": f"intel/intel-idxd-config-initcontainer@{DIGEST}"}
    eff, reasons = effective_spec(spec, env)
    assert eff.init_image == env["INTEL_IDXD_CONFIG_INITCONTAINER_SHA"]
    assert spec.image == "intel/intel-dsa-plugin:0.30.0"


def test_npu_has_only_a_plugin_image() -> None:
    eff, reasons = effective_spec(NpuSpec(image=OURS), {})
    assert eff.image == OURS and reasons == ()


def test_plugin_image_flag_wins_over_environment() -> None:
    from intel_device_plugins.operator import cli

    env = {PLUGIN_IMAGE_ENV: "env/intel-device-plugins-node:0.1.0", "X_SHA": "y", "PATH": "/bin"}
    assert cli.image_env(env) == {"X_SHA": "y", PLUGIN_IMAGE_ENV: env[PLUGIN_IMAGE_ENV]}
    assert cli.image_env(env, "flag/intel-device-plugins-node:0.1.0")[PLUGIN_IMAGE_ENV].startswith("flag/")
    assert PLUGIN_IMAGE_ENV not in cli.image_env({"PATH": "/bin"})
    opts = cli.parser().parse_args(["-deviceplugin-image=a/b:1.0.0"])
    assert opts.deviceplugin_image == "a/b:1.0.0"


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_validation_accepts_our_node_image_and_upstreams_for_every_kind(kind: DeviceKind) -> None:
    from intel_device_plugins.operator.validation import validate_object

    def image_warnings(warnings: tuple[str, ...]) -> list[str]:
        return [w for w in warnings if w.startswith("spec.image")]

    ours = validate_object(kind, {"spec": {"image": OURS}})
    assert ours.allowed and image_warnings(ours.warnings) == []
    upstream = validate_object(kind, {"spec": {"image": f"intel/intel-{kind.value}-plugin:0.36.0"}})
    assert upstream.allowed and OURS.split(":")[0] not in upstream.message
    assert any("operator deploys its own plugin image" in w for w in upstream.warnings)
    newer = validate_object(kind, {"spec": {"image": f"intel/intel-{kind.value}-plugin:0.40.0"}})
    assert newer.allowed and image_warnings(newer.warnings) == []
    wrong = validate_object(kind, {"spec": {"image": "intel-device-plugins/operator:0.1.0"}})
    assert not wrong.allowed
    assert "intel-device-plugins/intel-device-plugins-node" in wrong.message


def test_no_default_names_upstreams_images() -> None:
    for kind in DeviceKind:
        assert not images.default_plugin_image(kind).startswith(f"{images.UPSTREAM_VENDOR}/")
        init = images.default_init_image(kind)
        assert init is None or (kind is DeviceKind.FPGA and init == images.node_image())
    assert images.operator_image().startswith(images.DEFAULT_IMAGE_PREFIX + "/")
    assert images.image("x", "reg.example:5000/team/", "1.0.0") == "reg.example:5000/team/x:1.0.0"
    assert images.image("x", "", "1.0.0") == "x:1.0.0"


def test_plugin_image_is_checked_at_start() -> None:
    assert images.plugin_image_problem("") is None
    assert images.plugin_image_problem(CONFIGURED) is None
    assert images.plugin_image_problem(f"reg/intel-device-plugins-node@sha256:{'a' * 64}") is None
    no_tag = images.plugin_image_problem("reg/intel-device-plugins-node")
    assert no_tag is not None and "no tag" in no_tag
    other = images.plugin_image_problem("reg/intel-gpu-plugin:0.36.0")
    assert other is not None and "node image" in other
    from intel_device_plugins.operator import cli

    assert cli.main(["--deviceplugin-image=reg/intel-device-plugins-node"]) == 1
