"""The container images: built by tools/images/build.py (``make images``), then checked here for real.

Every console script runs ``--help`` inside each image as the image's user with every capability dropped;
the users are the ones the manifests run them as; the runtime holds no compiler, pip, uv or test code, no
setuid/setgid and no world-writable file, and every module of its environment has current bytecode; the
operator image holds no shell and no package manager; labels and sizes are as documented. A warm cache
makes the build a few hash computations, and the checks take a few seconds per image.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
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
    source = labels["org.opencontainers.image.source"]
    assert source == build.source_url() and not source.startswith(("/", "file:", ".")), source


@pytest.mark.parametrize(
    ("remote", "label"),
    [
        ("/work/main", "unknown"),
        ("../clone", "unknown"),
        ("file:///srv/git/repo.git", "unknown"),
        ("", "unknown"),
        ("https://example.org/team/repo.git", "https://example.org/team/repo.git"),
        ("https://user:secret@example.org/team/repo.git", "https://example.org/team/repo.git"),
        ("https://example.org/team/a@b.git", "https://example.org/team/a@b.git"),
        ("git@example.org:team/repo.git", "git@example.org:team/repo.git"),
    ],
)
def test_source_label_names_no_build_machine_path_or_credentials(remote: str, label: str) -> None:
    assert build.source_label(remote) == label


@pytest.mark.parametrize("target", sorted(build.TARGETS))
def test_no_setuid_setgid_or_world_writable_file(checks: dict[str, dict[str, Any]], target: str) -> None:
    result = checks[target]
    assert result["setid_files"] == [] and result["world_writable"] == [], result["output"]


@pytest.mark.parametrize("target", sorted(build.TARGETS))
def test_every_module_is_compiled_to_bytecode(checks: dict[str, dict[str, Any]], target: str) -> None:
    """The images run with PYTHONDONTWRITEBYTECODE=1: a module without current bytecode is compiled on
    every start, at a memory peak (docs/performance.md, "Bytecode")."""
    result = checks[target]
    assert result["uncompiled"] == [], result["output"]
    assert result["compiled_modules"] > 500  # the walk found the environment: grpclib, h2, this project…


def test_the_bytecode_check_finds_missing_and_stale_bytecode(tmp_path: Path) -> None:
    """CHECK_PROGRAM's bytecode walk, run here on a made-up environment (the rest of the walk skipped)."""
    package = tmp_path / "venv" / "pkg"
    package.mkdir(parents=True)
    for name in ("compiled", "missing", "stale"):
        (package / f"{name}.py").write_text(f"{name} = 1\n")
    for name in ("compiled", "stale"):
        py_compile.compile(str(package / f"{name}.py"), doraise=True)
    os.utime(package / "stale.py", (0, 0))  # edited after compiling: the .pyc no longer matches
    check_input = {
        "scripts": [],
        "forbidden": [],
        "skip": [f"/{entry}" for entry in os.listdir("/")],
        "hook": False,
        "venv": str(tmp_path / "venv"),
    }
    out = subprocess.run(
        [sys.executable, "-c", build.CHECK_PROGRAM, json.dumps(check_input)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = build.parse_findings(out)
    assert sorted(found["UNCOMPILED"]) == [str(package / "missing.py"), str(package / "stale.py")]
    assert found["COMPILED"] == ["1"]


def test_operator_image_has_no_shell_or_package_manager(checks: dict[str, dict[str, Any]]) -> None:
    result = checks["operator"]
    assert set(build.MINIMAL_FORBIDDEN) <= set(result["forbidden_checked"])
    assert result["forbidden_found"] == [], result["forbidden_found"]


def test_findings_are_read_by_kind() -> None:
    found = build.parse_findings(
        "UID 0\nSETID /usr/bin/su\nnoise\nFORBIDDEN /usr/bin/sh\nHOOKBUNDLE 12\n"
        "UNCOMPILED /a.py\nCOMPILED 3\n"
    )
    assert found["UNCOMPILED"] == ["/a.py"] and found["COMPILED"] == ["3"]
    assert found["UID"] == ["0"] and found["SETID"] == ["/usr/bin/su"] and found["HOOKBUNDLE"] == ["12"]
    assert found["FORBIDDEN"] == ["/usr/bin/sh"] and found["FAILED"] == [] and found["WORLDWRITABLE"] == []


def test_sizes(checks: dict[str, dict[str, Any]]) -> None:
    layers = {t: {d: s for d, s in r["layers"]} for t, r in checks.items()}
    unique = {d: s for per in layers.values() for d, s in per.items()}
    assert sum(unique.values()) < COMPRESSED_BUDGET, sum(unique.values())
    # The operator's minimal file system is smaller than the node image's, which it no longer shares.
    assert checks["operator"]["uncompressed_bytes"] < checks["node"]["uncompressed_bytes"]
    shared = set(layers["operator"]) & set(layers["node"])
    assert sum(layers["node"][d] for d in shared) < 1000  # at most an empty layer from relabelling


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
