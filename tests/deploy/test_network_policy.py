"""The shipped NetworkPolicies fail closed: rendered by kustomize and Helm, then evaluated for sources.

``admitted`` applies NetworkPolicy ingress semantics to one TCP connection from an address: a pod in any
common pod network (flannel, Calico, k3s, Cilium, VPC ranges) reaches none of the ports, and the configured
API server sources reach the webhook port only. The health port needs no rule: the kubelet probes from the
pod's own node, which NetworkPolicy always admits.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_charts import OPERATOR_CHART, _kustomize, _template

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
Obj = dict[str, Any]

#: An address of each common pod network: flannel/kubeadm, Calico, k3s, Cilium's cluster pool, a VPC, IPv6.
POD_ADDRESSES = ("10.244.1.7", "192.168.12.3", "10.42.0.9", "10.0.5.6", "172.31.40.2", "fd00:10:244::5")
PORTS = (9443, 8081, 8443)
API_SERVER_SOURCES = ["172.18.0.0/24", "fd00:18::/64"]


def _peer_admits(peer: Obj, source: str) -> bool:
    """One peer of a ``from`` list; selectors match pods of labelled namespaces, never a hostile pod's."""
    block = peer.get("ipBlock")
    if block is None:
        return False
    address = ipaddress.ip_address(source)
    network = ipaddress.ip_network(block["cidr"])
    if address.version != network.version or address not in network:
        return False
    return not any(address in ipaddress.ip_network(e) for e in block.get("except", ()))


def admitted(policy: Obj, source: str, port: int) -> bool:
    """Whether ``policy`` admits TCP from ``source`` to ``port``: some rule lists the port (no ``ports``:
    every port) and a peer matching the source (no ``from``: every source)."""
    assert "Ingress" in policy["spec"]["policyTypes"]
    for rule in policy["spec"].get("ingress") or ():
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
            continue
        peers = rule.get("from")
        if not peers or any(_peer_admits(peer, source) for peer in peers):
            return True
    return False


def _policy(objs: dict[tuple[str, str], Obj]) -> Obj:
    (policy,) = (o for k, o in objs.items() if k[0] == "NetworkPolicy")
    return policy


def test_the_evaluator_sees_a_policy_that_fails_open() -> None:
    """The previous policy (everything but one pod range) admitted every other pod network."""
    fails_open = {
        "spec": {
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}}],
                    "ports": [{"port": 9443, "protocol": "TCP"}],
                }
            ],
        }
    }
    assert not admitted(fails_open, "10.244.1.7", 9443)
    assert admitted(fails_open, "192.168.12.3", 9443)
    assert admitted({"spec": {"policyTypes": ["Ingress"], "ingress": [{}]}}, "10.0.5.6", 8081)


@pytest.mark.parametrize(
    "install",
    [
        "operator/default",
        "operator/self-signed",
        "operator/overlays/ha",
        "webhooks/fpga/default",
        "webhooks/sgx/self-signed",
    ],
)
def test_shipped_policy_admits_no_pod_to_any_port(kubectl: Path, install: str) -> None:
    policy = _policy(_kustomize(kubectl, DEPLOY / install))
    for source in (*POD_ADDRESSES, "203.0.113.9", "172.18.0.5"):
        for port in PORTS:
            assert not admitted(policy, source, port), (source, port)


def _configured_kustomization(tmp_path: Path, install: str, policy_name: str) -> Path:
    """What docs/install.md tells a user to write: the install plus one patch naming the sources."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    patch = [
        {
            "op": "replace",
            "path": "/spec/ingress/0/from",
            "value": [{"ipBlock": {"cidr": c}} for c in API_SERVER_SOURCES],
        }
    ]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(DEPLOY / install, overlay)],
                "patches": [
                    {"target": {"kind": "NetworkPolicy", "name": policy_name}, "patch": yaml.safe_dump(patch)}
                ],
            }
        )
    )
    return overlay


def _assert_configured(policy: Obj) -> None:
    for source in ("172.18.0.5", "fd00:18::3"):
        assert admitted(policy, source, 9443), source
        assert not admitted(policy, source, 8081) and not admitted(policy, source, 8443), source
    for source in POD_ADDRESSES:
        for port in PORTS:
            assert not admitted(policy, source, port), (source, port)


@pytest.mark.parametrize(
    ("install", "policy_name"),
    [
        ("operator/self-signed", "intel-deviceplugins-controller-manager-ingress"),
        ("webhooks/fpga/default", "intelfpgawebhook-webhook-ingress"),
    ],
)
def test_configured_sources_reach_the_webhook_port_and_nothing_else(
    kubectl: Path, tmp_path: Path, install: str, policy_name: str
) -> None:
    _assert_configured(
        _policy(_kustomize(kubectl, _configured_kustomization(tmp_path, install, policy_name)))
    )


def test_chart_admits_the_configured_sources_only(helm: Path) -> None:
    sources = "networkPolicy.apiServerCIDRs={" + ",".join(API_SERVER_SOURCES) + "}"
    _assert_configured(_policy(_template(helm, OPERATOR_CHART, sources)))


def test_chart_without_sources_names_the_missing_value(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "template", "idp", str(OPERATOR_CHART)], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    assert "networkPolicy.apiServerCIDRs is empty" in proc.stderr
    assert "docs/install.md" in proc.stderr
