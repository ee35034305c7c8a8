"""Upstream 0.37.x sample CRs deploy this project's node image, and their init images are kept current.

This project replaces upstream 0.37.2: a CR copied from upstream's samples of 0.37.0, 0.37.1 or 0.37.2 must
run this project's plugin, not upstream's Go binary; init images (which this project does not build) are
raised to 0.37.2, the release with the DSA/IAA init container fix for restarts while devices are in use.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator import images
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.reconcile import plan
from intel_device_plugins.operator.upgrade import effective_image
from intel_device_plugins.operator.validation import validate_object

SAMPLES = Path(__file__).parent / "data" / "upstream_0372_samples.yaml"
NAMESPACE = "inteldeviceplugins-system"
OURS = images.node_image()
UPSTREAM_037 = ("0.37.0", "0.37.1", "0.37.2")


def samples() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SAMPLES.read_text())
    return data


def sample(kind: DeviceKind, tag: str = "0.37.2") -> dict[str, Any]:
    """Upstream's sample of ``kind`` as released with ``tag`` (0.37.x samples differ only in the tags)."""
    body: dict[str, Any] = copy.deepcopy(samples()[kind.value])
    spec = body["spec"]
    for field in ("image", "initImage"):
        if field in spec:
            spec[field] = spec[field].replace(":0.37.2", f":{tag}")
    body["metadata"]["uid"] = f"uid-{kind.value}"
    return body


def containers(daemonset: dict[str, Any], key: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"].get(key, [])
    return found


KINDS_037 = [k for k in DeviceKind if k is not DeviceKind.DLB]


def test_the_data_is_upstreams_0372_sample_set_without_dlb() -> None:
    assert set(samples()) == {k.value for k in KINDS_037}
    for kind in KINDS_037:
        assert sample(kind)["spec"]["image"] == f"intel/intel-{kind.value}-plugin:0.37.2"


@pytest.mark.parametrize("tag", UPSTREAM_037)
@pytest.mark.parametrize("kind", KINDS_037, ids=lambda k: k.value)
def test_upstream_037_samples_deploy_this_projects_node_image(kind: DeviceKind, tag: str) -> None:
    cr = sample(kind, tag)
    verdict = validate_object(kind, cr)
    assert verdict.allowed, verdict.message
    assert any("operator deploys its own plugin image" in w for w in verdict.warnings)
    result = plan(kind, cr, {}, NAMESPACE)
    assert result.daemonset is not None and not result.errors
    (container,) = containers(result.daemonset, "containers")
    assert container["image"] == OURS
    assert any(f"intel-{kind.value}-plugin:{tag}" in note and OURS in note for note in result.image_notes)


@pytest.mark.parametrize("tag", UPSTREAM_037)
@pytest.mark.parametrize("kind", [DeviceKind.DSA, DeviceKind.IAA, DeviceKind.QAT], ids=lambda k: k.value)
def test_upstream_037_init_images_run_at_0372(kind: DeviceKind, tag: str) -> None:
    result = plan(kind, sample(kind, tag), {}, NAMESPACE)
    assert result.daemonset is not None
    (init,) = containers(result.daemonset, "initContainers")
    wanted = samples()[kind.value]["spec"]["initImage"]
    assert init["image"] == wanted  # 0.37.0 and 0.37.1 raised, 0.37.2 as written


def test_dsa_init_image_of_036_gets_the_restart_fix_of_0371() -> None:
    """0.36.0's idxd init container exits with an error when a device it re-configures is in use, so a
    restarted DSA/IAA plugin pod never became ready; 0.37.1 fixed it. Old CRs get the fixed image."""
    for kind in (DeviceKind.DSA, DeviceKind.IAA):
        cr = sample(kind)
        cr["spec"]["initImage"] = "intel/intel-idxd-config-initcontainer:0.36.0"
        result = plan(kind, cr, {}, NAMESPACE)
        assert result.daemonset is not None
        (init,) = containers(result.daemonset, "initContainers")
        assert init["image"] == "intel/intel-idxd-config-initcontainer:0.37.2"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("intel/intel-gpu-plugin:0.37.2", OURS),
        ("registry.example:5000/intel/intel-gpu-plugin:0.37.1", OURS),
        # releases after the one this project replaces: deployed as written
        ("intel/intel-gpu-plugin:0.37.3", "intel/intel-gpu-plugin:0.37.3"),
        ("intel/intel-gpu-plugin:0.38.0", "intel/intel-gpu-plugin:0.38.0"),
        ("intel/intel-gpu-plugin:0.38.0-rc.1", "intel/intel-gpu-plugin:0.38.0-rc.1"),
        # init images: raised to 0.37.2, but DLB's only to 0.36.0, its last upstream release
        ("intel/intel-sgx-initcontainer:0.36.0", "intel/intel-sgx-initcontainer:0.37.2"),
        ("intel/intel-dlb-initcontainer:0.35.0", "intel/intel-dlb-initcontainer:0.36.0"),
        ("intel/intel-dlb-initcontainer:0.36.0", "intel/intel-dlb-initcontainer:0.36.0"),
    ],
)
def test_image_mapping_around_0372(image: str, expected: str) -> None:
    assert effective_image(image, {}, ("intel-gpu-plugin",)).image == expected


def test_upstreams_last_dlb_sample_still_deploys_ours_with_its_init_image() -> None:
    cr = {
        "metadata": {"name": "dlbdeviceplugin-sample", "uid": "u"},
        "spec": {
            "image": "intel/intel-dlb-plugin:0.36.0",
            "initImage": "intel/intel-dlb-initcontainer:0.36.0",
            "logLevel": 4,
        },
    }
    result = plan(DeviceKind.DLB, cr, {}, NAMESPACE)
    assert result.daemonset is not None
    (container,) = containers(result.daemonset, "containers")
    (init,) = containers(result.daemonset, "initContainers")
    assert container["image"] == OURS
    assert init["image"] == "intel/intel-dlb-initcontainer:0.36.0"
