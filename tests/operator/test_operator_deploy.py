"""The kustomize tree under deploy/: every overlay renders, samples validate, RBAC stays least-privilege."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.cmd import crdgen
from intel_device_plugins.operator.kinds import ALL_KINDS, API_VERSION, DeviceKind
from intel_device_plugins.operator.validation import default_spec, validate_object
from k8stest.binaries import find_binaries, in_ci

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Components (kind: Component) render only as part of a kustomization that uses them.
KUSTOMIZE_DIRS = sorted(
    p.parent
    for p in DEPLOY.rglob("kustomization.yaml")
    if yaml.safe_load(p.read_text()).get("kind") != "Component"
)


@cache
def kubectl() -> str:
    """The kubectl that test/k8s/build.sh builds; missing fails under CI=true, as the k8s fixtures do."""
    bins, reason = find_binaries()
    if bins is None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return str(bins.path("kubectl"))


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d is not None)


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize("directory", KUSTOMIZE_DIRS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_kustomize_renders(directory: Path) -> None:
    docs = render(directory)
    assert docs
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), doc


def test_webhook_configurations_are_current() -> None:
    for name, text in crdgen.expected_webhook_files().items():
        assert (DEPLOY / "operator" / "webhook" / name).read_text() == text, (
            "regenerate with crdgen --webhook-dir"
        )


def all_yaml_docs() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                out.append((path, doc))
    return out


SAMPLES = [(p, d) for p, d in all_yaml_docs() if d.get("apiVersion") == API_VERSION]


@pytest.mark.parametrize(("path", "doc"), SAMPLES, ids=lambda v: v.name if isinstance(v, Path) else "")
def test_every_sample_passes_validation(path: Path, doc: dict[str, Any]) -> None:
    kind = DeviceKind.from_kind(doc["kind"])
    as_given = validate_object(kind, doc)
    assert as_given.allowed, f"{path}: {as_given.message}"
    assert not as_given.warnings, as_given.warnings
    defaulted = validate_object(kind, {**doc, "spec": default_spec(kind, doc.get("spec"))})
    assert defaulted.allowed


def test_samples_cover_every_kind() -> None:
    assert {DeviceKind.from_kind(d["kind"]) for _, d in SAMPLES} == set(ALL_KINDS)
    rendered = render(DEPLOY / "operator" / "samples")
    assert {d["kind"] for d in rendered} == {k.kind for k in ALL_KINDS}


def _rules(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [r for d in docs if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]


@pytest.mark.parametrize("overlay", ["default", "self-signed"])
def test_rbac_is_least_privilege(overlay: str) -> None:
    docs = render(DEPLOY / "operator" / overlay)
    for rule in _rules(docs):
        assert "*" not in rule["verbs"] and "*" not in rule.get("resources", []), rule
        assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"]
    cluster = [r for d in by_kind(docs, "ClusterRole") for r in d["rules"]]
    assert not any({"daemonsets", "pods"} & set(r.get("resources", [])) for r in cluster), (
        "workload access must be namespaced"
    )
    secrets = [r for r in _rules(docs) if "secrets" in r.get("resources", [])]
    if overlay == "default":
        assert secrets == []
    else:
        # by name, but create (which RBAC cannot limit to a name): the Secret is re-created when deleted
        assert all(r.get("resourceNames") or r["verbs"] == ["create"] for r in secrets), secrets
        assert sorted(v for r in secrets for v in r["verbs"]) == ["create", "get", "list", "update", "watch"]
        cluster_wide = [r for d in by_kind(docs, "ClusterRole") for r in d["rules"]]
        assert not any("secrets" in r.get("resources", []) for r in cluster_wide)
    crs = next(r for r in cluster if "gpudeviceplugins" in r.get("resources", []))
    assert set(crs["verbs"]) == {"get", "list", "watch"}
    fpga_sa = "intel-deviceplugins-fpga-plugin"
    dra_sa = "intel-deviceplugins-dra-driver"
    for binding in by_kind(docs, "RoleBinding") + by_kind(docs, "ClusterRoleBinding"):
        (subject,) = binding["subjects"]
        assert subject["name"] in ("intel-deviceplugins-controller-manager", fpga_sa, dra_sa)
        if subject["name"] == dra_sa:
            # Only the resource.k8s.io objects a driver writes, its node and claims by name; the
            # ResourceSlice admission policy narrows the slices to the pod's own node.
            (role,) = (
                d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == binding["roleRef"]["name"]
            )
            assert {g for r in role["rules"] for g in r["apiGroups"]} == {"", "resource.k8s.io"}
            assert {res for r in role["rules"] for res in r["resources"]} == {
                "events",
                "nodes",
                "resourceclaims",
                "resourceslices",
            }
            # Events on the Node when a device's health changes: created, never read or changed.
            events = [r for r in role["rules"] if "events" in r["resources"]]
            assert events == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
        if subject["name"] == fpga_sa:
            assert binding["roleRef"]["kind"] == "ClusterRole"
            (role,) = (
                d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == binding["roleRef"]["name"]
            )
            assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


@pytest.mark.parametrize("overlay", ["default", "self-signed", "overlays/combined", "overlays/ha"])
def test_fpga_plugin_service_account_is_shipped_and_named_to_the_operator(overlay: str) -> None:
    """The name the Deployment hands the operator is the ServiceAccount's name after the name prefix, and
    that ServiceAccount is bound to getting nodes only."""
    docs = render(DEPLOY / "operator" / overlay)
    (dep,) = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    name = env["FPGA_PLUGIN_SERVICE_ACCOUNT"]
    (sa,) = (d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == name)
    assert sa["metadata"]["namespace"] == dep["metadata"]["namespace"]
    bindings = [
        b
        for b in by_kind(docs, "ClusterRoleBinding") + by_kind(docs, "RoleBinding")
        if {"kind": "ServiceAccount", "name": name, "namespace": sa["metadata"]["namespace"]} in b["subjects"]
    ]
    (binding,) = bindings
    (role,) = (d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == binding["roleRef"]["name"])
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]


def test_operator_deployment() -> None:
    docs = render(DEPLOY / "operator" / "default")
    (dep,) = by_kind(docs, "Deployment")
    assert dep["metadata"]["name"] == "intel-deviceplugins-controller-manager"
    assert dep["metadata"]["namespace"] == "inteldeviceplugins-system"
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["intel_deviceplugin_operator"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["memory"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp/k8s-webhook-server/serving-certs" in mounts
    for cfg in by_kind(docs, "MutatingWebhookConfiguration") + by_kind(
        docs, "ValidatingWebhookConfiguration"
    ):
        annotation = cfg["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        (cert,) = by_kind(docs, "Certificate")
        assert annotation == f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
        svc = cfg["webhooks"][0]["clientConfig"]["service"]
        assert svc["name"] == "intel-deviceplugins-webhook-service"
        assert f"{svc['name']}.{svc['namespace']}.svc" in cert["spec"]["dnsNames"]


def test_self_signed_mode_has_no_cert_manager() -> None:
    docs = render(DEPLOY / "operator" / "self-signed")
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io")]
    for cfg in by_kind(docs, "MutatingWebhookConfiguration") + by_kind(
        docs, "ValidatingWebhookConfiguration"
    ):
        assert "cert-manager.io/inject-ca-from" not in (cfg["metadata"].get("annotations") or {})
    (dep,) = by_kind(docs, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-cert-mode=self-managed" in args
    names = {d["metadata"]["name"] for d in docs}
    for arg in args:
        if arg.startswith(("--webhook-secret=", "--webhook-configuration=", "--webhook-service=")):
            assert arg.split("=", 1)[1] in names, arg


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_device_overlays(kind: DeviceKind) -> None:
    docs = render(DEPLOY / "operator" / "device" / kind.value)
    (dep,) = by_kind(docs, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--devices")] == [f"--devices={kind.value}"]
    assert len(by_kind(docs, "CustomResourceDefinition")) == len(ALL_KINDS) + 2  # and two fpga.intel.com


def test_nfd_rules_label_every_sample_selector() -> None:
    docs = render(DEPLOY / "nfd")
    labels = {k for d in docs for rule in d["spec"]["rules"] for k in rule.get("labels", {})}
    for _, sample in SAMPLES:
        for key in sample["spec"].get("nodeSelector", {}):
            assert key in labels, key


@pytest.mark.parametrize("overlay", ["default", "self-signed"])
def test_secure_metrics(overlay: str) -> None:
    docs = render(DEPLOY / "operator" / overlay)
    (dep,) = by_kind(docs, "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-secure" in c["args"] and "--metrics-bind-address=:8443" in c["args"]
    (svc,) = [d for d in by_kind(docs, "Service") if "metrics" in d["metadata"]["name"]]
    assert svc["spec"]["ports"][0]["targetPort"] == 8443
    rules = [r for d in by_kind(docs, "ClusterRole") for r in d["rules"]]
    assert {
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["tokenreviews"],
        "verbs": ["create"],
    } in rules
    assert {"nonResourceURLs": ["/metrics"], "verbs": ["get"]} in rules


def test_manifest_images_match_the_image_module() -> None:
    from intel_device_plugins.operator import images

    (dep,) = by_kind(render(DEPLOY / "operator" / "default"), "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == images.operator_image()
    for _, sample in SAMPLES:
        kind = DeviceKind.from_kind(sample["kind"])
        assert sample["spec"]["image"] == images.default_plugin_image(kind)
        if "initImage" in sample["spec"]:
            assert sample["spec"]["initImage"] == images.default_init_image(kind)


def test_ha_overlay() -> None:
    docs = render(DEPLOY / "operator" / "overlays" / "ha")
    (dep,) = by_kind(docs, "Deployment")
    (pdb,) = by_kind(docs, "PodDisruptionBudget")
    assert (
        dep["spec"]["replicas"] == 2
        and "--leader-elect" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert pdb["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] == 1


def test_combined_overlay_adds_the_flag_and_only_daemonset_delete() -> None:
    docs = render(DEPLOY / "operator" / "overlays" / "combined")
    (deployment,) = by_kind(docs, "Deployment")
    assert "--combined-plugin-process" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    role = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("combined-role"))
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["delete"]}]
    assert role["metadata"]["namespace"] == "inteldeviceplugins-system"
    binding = next(
        b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == role["metadata"]["name"]
    )
    assert binding["subjects"][0]["name"] == "intel-deviceplugins-controller-manager"
    base = render(DEPLOY / "operator" / "self-signed")
    assert not any(r["metadata"]["name"].endswith("combined-role") for r in by_kind(base, "Role"))


@pytest.mark.parametrize("overlay", ["default", "self-signed", "overlays/combined", "overlays/ha"])
def test_every_object_of_the_install_carries_the_name_prefix(overlay: str) -> None:
    """Like every other object of the install, so none is taken for another installation's."""
    unprefixed = [
        (d["kind"], d["metadata"]["name"])
        for d in render(DEPLOY / "operator" / overlay)
        if d["kind"] not in ("Namespace", "CustomResourceDefinition")
        and not d["metadata"]["name"].startswith("intel-deviceplugins-")
    ]
    assert unprefixed == []
