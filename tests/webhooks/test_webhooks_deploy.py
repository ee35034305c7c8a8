"""CRDs and kustomize trees of the pod webhooks: current, upstream's policies, least privilege."""

from __future__ import annotations

import os
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.webhooks import crds as crdgen
from intel_device_plugins.webhooks.handlers import NAMESPACE_SELECTOR
from intel_device_plugins.webhooks.model import MODE_PATTERN
from intel_device_plugins.webhooks.store import FpgaKind
from k8stest.binaries import find_binaries, in_ci

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    bins, reason = find_binaries()
    if bins is None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    out = subprocess.run(
        [str(bins.path("kubectl")), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_standalone_webhook_configurations_are_current() -> None:
    for name, text in crdgen.standalone_webhook_files().items():
        assert (DEPLOY / "webhooks" / name).read_text() == text, "regenerate with crdgen --standalone-dir"


def test_fpga_crds_follow_upstream_with_an_exact_mode() -> None:
    af = crdgen.fpga_crd(FpgaKind.ACCELERATOR_FUNCTION)
    region = crdgen.fpga_crd(FpgaKind.FPGA_REGION)
    assert af["spec"]["names"]["shortNames"] == ["af"] and region["spec"]["names"]["shortNames"] == ["fpga"]
    assert af["spec"]["scope"] == region["spec"]["scope"] == "Namespaced"
    assert af["spec"]["versions"][0]["name"] == "v2" and "subresources" not in af["spec"]["versions"][0]
    spec = af["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["afuId", "interfaceId", "mode"]
    assert spec["properties"]["afuId"]["pattern"] == "^[0-9a-f]{8,40}$"
    assert spec["properties"]["interfaceId"]["pattern"] == "^[0-9a-f]{8,32}$"
    mode = spec["properties"]["mode"]["pattern"]
    assert mode == MODE_PATTERN
    assert [m for m in ("af", "region", "afx", "xregion", "regiondevel", "") if re.search(mode, m)] == [
        "af",
        "region",
    ]
    rspec = region["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert rspec["required"] == ["interfaceId"]


def _pod_hooks(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    (config,) = of_kind(docs, "MutatingWebhookConfiguration")
    return {h["name"]: h for h in config["webhooks"] if h["rules"][0]["resources"] == ["pods"]}


@pytest.mark.parametrize(
    ("overlay", "expected"),
    [
        ("webhooks/fpga/default", {"fpga.mutator.webhooks.intel.com": "/pods"}),
        ("webhooks/fpga/self-signed", {"fpga.mutator.webhooks.intel.com": "/pods"}),
        ("webhooks/sgx/default", {"sgx.mutator.webhooks.intel.com": "/mutate--v1-pod"}),
        ("webhooks/sgx/self-signed", {"sgx.mutator.webhooks.intel.com": "/mutate--v1-pod"}),
        (
            "operator/default",
            {"fpga.mutator.webhooks.intel.com": "/pods", "sgx.mutator.webhooks.intel.com": "/mutate--v1-pod"},
        ),
        (
            "operator/self-signed",
            {"fpga.mutator.webhooks.intel.com": "/pods", "sgx.mutator.webhooks.intel.com": "/mutate--v1-pod"},
        ),
    ],
)
def test_pod_webhooks_fail_open_and_stay_out_of_kube_system(overlay: str, expected: dict[str, str]) -> None:
    docs = render(DEPLOY / overlay)
    hooks = _pod_hooks(docs)
    assert {n: h["clientConfig"]["service"]["path"] for n, h in hooks.items()} == expected
    (service,) = [d for d in of_kind(docs, "Service") if d["metadata"]["name"].endswith("webhook-service")]
    for name, hook in hooks.items():
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["namespaceSelector"] == NAMESPACE_SELECTOR
        assert hook["rules"][0]["operations"] == ["CREATE"]
        assert hook.get("reinvocationPolicy") == ("IfNeeded" if name.startswith("sgx") else None)
        assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
        assert hook["clientConfig"]["service"]["namespace"] == service["metadata"]["namespace"]


@pytest.mark.parametrize("which", ["fpga", "sgx"])
def test_standalone_names_and_certificate_wiring(which: str) -> None:
    ns, prefix = f"intel{which}webhook-system", f"intel{which}webhook-"
    docs = render(DEPLOY / "webhooks" / which / "default")
    (dep,) = of_kind(docs, "Deployment")
    assert dep["metadata"]["name"] == f"{prefix}webhook" and dep["metadata"]["namespace"] == ns
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [f"intel_{which}_admissionwebhook"]
    assert {
        "name": "cert",
        "mountPath": "/tmp/k8s-webhook-server/serving-certs",
        "readOnly": True,
    } in container["volumeMounts"]
    (config,) = of_kind(docs, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{ns}/{prefix}serving-cert"
    }
    (cert,) = of_kind(docs, "Certificate")
    assert cert["spec"]["dnsNames"][0] == f"{prefix}webhook-service.{ns}.svc"

    docs = render(DEPLOY / "webhooks" / which / "self-signed")
    (dep,) = of_kind(docs, "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Secret", f"{prefix}webhook-server-cert") in names
    assert ("MutatingWebhookConfiguration", f"{prefix}mutating-webhook-configuration") in names
    assert ("Service", f"{prefix}webhook-service") in names
    assert {
        "--webhook-cert-mode=self-managed",
        f"--webhook-service={prefix}webhook-service",
        f"--webhook-secret={prefix}webhook-server-cert",
        f"--webhook-configuration={prefix}mutating-webhook-configuration",
    } <= set(args)


def test_rbac_is_least_privilege() -> None:
    fpga = render(DEPLOY / "webhooks" / "fpga" / "default")
    rules = [r for role in of_kind(fpga, "ClusterRole") + of_kind(fpga, "Role") for r in role["rules"]]
    assert rules == [
        {
            "apiGroups": ["fpga.intel.com"],
            "resources": ["acceleratorfunctions", "fpgaregions"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    sgx = render(DEPLOY / "webhooks" / "sgx" / "default")
    assert not of_kind(sgx, "ClusterRole") and not of_kind(sgx, "Role")
    (dep,) = of_kind(sgx, "Deployment")
    assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    operator = render(DEPLOY / "operator" / "default")
    (manager,) = [
        r for r in of_kind(operator, "ClusterRole") if r["metadata"]["name"].endswith("manager-role")
    ]
    assert {
        "apiGroups": ["fpga.intel.com"],
        "resources": ["acceleratorfunctions", "fpgaregions"],
        "verbs": ["get", "list", "watch"],
    } in manager["rules"]


def test_deviceclasses_component_adds_the_flag_and_only_the_rights_on_deviceclasses(tmp_path: Path) -> None:
    """Opt-in: the default install has neither; an overlay with the component has both, bound to the
    webhook's own ServiceAccount under the overlay's names."""
    (plain,) = of_kind(render(DEPLOY / "webhooks" / "fpga" / "default"), "Deployment")
    assert "--manage-deviceclasses" not in plain["spec"]["template"]["spec"]["containers"][0]["args"]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    fpga = DEPLOY / "webhooks" / "fpga"
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(fpga / "default", overlay)],
                "components": [os.path.relpath(fpga / "deviceclasses", overlay)],
            }
        )
    )
    docs = render(overlay)
    (dep,) = of_kind(docs, "Deployment")
    assert "--manage-deviceclasses" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    roles = {r["metadata"]["name"]: r["rules"] for r in of_kind(docs, "ClusterRole")}
    added = roles.pop("intel-fpga-admissionwebhook-deviceclasses")
    assert added == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["deviceclasses"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        }
    ]
    assert all(r["apiGroups"] == ["fpga.intel.com"] for rules in roles.values() for r in rules), roles
    bindings = {b["roleRef"]["name"]: b["subjects"] for b in of_kind(docs, "ClusterRoleBinding")}
    assert bindings["intel-fpga-admissionwebhook-deviceclasses"] == [
        {"kind": "ServiceAccount", "name": "intelfpgawebhook-webhook", "namespace": "intelfpgawebhook-system"}
    ]


@pytest.mark.parametrize(
    "overlay",
    ["operator/default", "operator/self-signed", "webhooks/fpga/default", "webhooks/sgx/self-signed"],
)
def test_network_policy_admits_only_the_api_servers_sources_to_the_webhook(overlay: str) -> None:
    """Failing closed: a placeholder that admits nothing until the cluster's API server sources replace it
    (tests/deploy/test_network_policy.py evaluates the policies for pod and API server addresses)."""
    docs = render(DEPLOY / overlay)
    (policy,) = of_kind(docs, "NetworkPolicy")
    (dep,) = of_kind(docs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    by_port: dict[int, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            by_port.setdefault(port["port"], []).extend(rule["from"])
    assert by_port[9443] == [{"ipBlock": {"cidr": "192.0.2.1/32"}}]
    if overlay.startswith("operator"):
        assert by_port[8443] == [{"namespaceSelector": {"matchLabels": {"intel.com/monitoring": "true"}}}]
    assert set(by_port) <= {9443, 8443}  # health (8081): the kubelet probes from the pod's own node
