"""The container images: built by tools/images/build.py (``make images``), then checked here for real.

Every console script runs ``--help`` inside each image as the image's user with every capability dropped;
the users are the ones the manifests run them as; the runtime holds no compiler, pip, uv or test code;
labels and sizes are as documented. A warm cache makes the build a few hash computations, and the checks
take a few seconds per image.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator import images
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]
#: Target from issue 8: operator and node together, shared layers counted once.
COMPRESSED_BUDGET = 120_000_000


def _load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("images_build", ROOT / "tools" / "images" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def built() -> dict[str, Any]:
    """Build (or find) every target; returns target -> build.Built."""
    try:
        build.ensure_tools()
        cache = build.DEFAULT_CACHE
        cache.mkdir(parents=True, exist_ok=True)
        base_id = build.ensure_base(cache)
        version, rev, src = build.project_version(), build.revision(), build.source_url()
        return {t: build.build_target(t, cache, base_id, version, rev, src) for t in build.TARGETS}
    except (build.BuildError, OSError) as exc:
        _missing(f"the images cannot be built here: {exc}")
        raise


@pytest.fixture(scope="session")
def checks(built: dict[str, Any]) -> dict[str, dict[str, Any]]:
    scripts = build.console_scripts()
    return {t: build.check_image(b, scripts) for t, b in built.items()}


def test_image_names_come_from_the_image_module() -> None:
    version = build.project_version()
    assert version == images.PROJECT_VERSION
    assert build.image_ref("operator", version) == images.operator_image()
    assert build.image_ref("node", version) == images.node_image()


@pytest.mark.parametrize("target", sorted(build.TARGETS))
def test_every_entrypoint_runs_inside_the_image(checks: dict[str, dict[str, Any]], target: str) -> None:
    result = checks[target]
    assert result["ok"], result["output"]
    assert result["scripts"] == list(build.console_scripts())
    # What the manifests and DaemonSets run.
    wanted = {"intel_device_plugins", "gpu_nfdhook", "sgx_epchook", "intel_deviceplugin_operator"}
    wanted |= {"intel_fpga_crihook", "fpga_tool", "intel_fpga_hook_install"}
    wanted |= {images.plugin_command(k) for k in DeviceKind}
    assert set(result["scripts"]) >= wanted


def test_operator_runs_as_the_manifests_user(checks: dict[str, dict[str, Any]]) -> None:
    manager = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "operator" / "manager" / "manager.yaml").read_text())
        if d["kind"] == "Deployment"
    )
    pod_sc = manager["spec"]["template"]["spec"]["securityContext"]
    result = checks["operator"]
    assert result["uid"] == str(pod_sc["runAsUser"]) == "65532"
    assert pod_sc["runAsNonRoot"] is True
    assert result["config_user"].split(":")[0] == "65532"
    assert result["entrypoint"] == ["/opt/venv/bin/intel_deviceplugin_operator"]
    container = manager["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_node_image_runs_plugins_as_root_as_their_daemonsets_do(checks: dict[str, dict[str, Any]]) -> None:
    assert checks["node"]["uid"] == "0"
    for kind in DeviceKind:
        spec = parse_spec(kind, {"image": images.node_image()})
        ds = desired_daemonset(spec, Owner(kind, "x", "uid"), "ns")
        container = ds["spec"]["template"]["spec"]["containers"][0]
        # The DaemonSet leaves the user to the image (root: kubelet socket directory, device nodes) …
        assert "runAsUser" not in container["securityContext"]
        # … and takes every capability and the writable root filesystem away.
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("target", sorted(build.TARGETS))
def test_labels(checks: dict[str, dict[str, Any]], target: str) -> None:
    labels = checks[target]["labels"]
    assert labels["org.opencontainers.image.version"] == images.PROJECT_VERSION
    assert labels["org.opencontainers.image.revision"] == build.revision()
    assert labels["org.opencontainers.image.source"]


def test_sizes_and_shared_layers(checks: dict[str, dict[str, Any]]) -> None:
    layers = {t: {d: s for d, s in r["layers"]} for t, r in checks.items()}
    unique = {d: s for per in layers.values() for d, s in per.items()}
    assert sum(unique.values()) < COMPRESSED_BUDGET, sum(unique.values())
    # Every layer of the operator is a layer of the node image: the two differ only in configuration.
    assert set(layers["operator"]) == set(layers["node"])


def test_archives_are_oci_layouts_with_the_image_name(built: dict[str, Any]) -> None:
    import json
    import tarfile

    for target, b in built.items():
        with tarfile.open(b.archive) as tar:
            layout = tar.extractfile("oci-layout")
            index = tar.extractfile("index.json")
            assert layout and index
            assert json.load(layout)["imageLayoutVersion"] == "1.0.0"
            (manifest,) = json.load(index)["manifests"]
            assert manifest["annotations"]["org.opencontainers.image.ref.name"].endswith(
                images.PROJECT_VERSION
            ), target


def test_node_image_installs_a_small_self_contained_fpga_hook(checks: dict[str, dict[str, Any]]) -> None:
    # The installer ran in the image and the installed launcher answered --help with an empty environment.
    size = checks["node"]["fpga_hook_bundle_bytes"]
    assert size is not None, checks["node"]["output"]
    assert 1_000_000 < size < 40_000_000


def test_prune_keeps_the_newest_archives_of_one_target(tmp_path: Path) -> None:
    for age, name in enumerate(
        ["node-0.1.0-a", "node-0.1.0-b", "node-0.1.0-c", "node-0.1.0-d", "operator-0.1.0-a"]
    ):
        archive = tmp_path / f"{name}.oci.tar"
        archive.write_bytes(b"x")
        archive.with_suffix(".check.json").write_text("{}")
        os.utime(archive, (1000 - age, 1000 - age))  # "a" is the newest
    removed = build.prune_archives(tmp_path, "node", keep=2)
    assert [p.name for p in removed] == ["node-0.1.0-c.oci.tar", "node-0.1.0-d.oci.tar"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "node-0.1.0-a.oci.check.json",
        "node-0.1.0-a.oci.tar",
        "node-0.1.0-b.oci.check.json",
        "node-0.1.0-b.oci.tar",
        "operator-0.1.0-a.oci.check.json",
        "operator-0.1.0-a.oci.tar",
    ]
