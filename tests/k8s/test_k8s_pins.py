"""The control plane (test/k8s) and the real node's kubelet (test/node) are one Kubernetes release.

Why a test: the two Go modules are pinned together by test/k8s/hack/pin-kubernetes.sh, and a
hand edit of one of them would quietly build a kubelet of another release than the API server, or
compile the packages they share twice.
"""

from __future__ import annotations

from pathlib import Path

from k8stest.gomod import effective_versions, required_version

TEST_DIR = Path(__file__).resolve().parents[2] / "test"


def _versions(module_dir: str) -> dict[str, str]:
    return effective_versions((TEST_DIR / module_dir / "go.mod").read_text())


def test_kubelet_and_control_plane_pin_the_same_release() -> None:
    control_plane = _versions("k8s")
    node = _versions("node")
    release = control_plane["k8s.io/kubernetes"]
    assert node["k8s.io/kubernetes"] == release
    differing = {
        path: (control_plane[path], node[path])
        for path in control_plane.keys() & node.keys()
        if control_plane[path] != node[path]
    }
    assert differing == {}, f"test/k8s/go.mod and test/node/go.mod differ: {differing}"


def test_staging_modules_are_the_release_of_kubernetes() -> None:
    for module_dir in ("k8s", "node"):
        versions = _versions(module_dir)
        minor_patch = versions["k8s.io/kubernetes"].removeprefix("k8s.io/kubernetes@v1.")
        staging = {
            path: version
            for path, version in versions.items()
            if path.startswith("k8s.io/") and version.endswith("@v0.0.0")
        }
        assert staging == {}, f"test/{module_dir}/go.mod: staging modules without a replace: {staging}"
        for path in ("k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet"):
            assert versions[path] == f"{path}@v0.{minor_patch}", (module_dir, path, versions[path])


def test_a_require_is_found_on_its_own_line_or_in_a_block_and_a_replace_wins() -> None:
    go_mod = """module example

require k8s.io/kubernetes v1.36.3 // indirect

require (
\tk8s.io/api v0.0.0 // indirect
\tgoogle.golang.org/grpc v1.79.3
)

replace k8s.io/api => k8s.io/api v0.36.3
"""
    assert effective_versions(go_mod) == {
        "k8s.io/kubernetes": "k8s.io/kubernetes@v1.36.3",
        "k8s.io/api": "k8s.io/api@v0.36.3",
        "google.golang.org/grpc": "google.golang.org/grpc@v1.79.3",
    }
    in_block = go_mod.replace(
        "require k8s.io/kubernetes v1.36.3 // indirect", "require (\n\tk8s.io/kubernetes v1.36.3\n)"
    )
    assert required_version(in_block, "k8s.io/kubernetes") == "v1.36.3"
