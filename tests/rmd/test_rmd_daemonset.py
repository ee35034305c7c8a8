"""RMD as the operator's DaemonSet runs it: the shipped rmd.toml and the mounted Secrets admit the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from intel_device_plugins.rmd import pki
from intel_device_plugins.rmd.client import RmdApiError, RmdClient, TlsMaterial, Transport, client_ssl_context
from intel_device_plugins.rmd.model import RmdConfigSpec, parse
from intel_device_plugins.rmd.reconcile import (
    RMD_CLIENT_SECRET,
    RMD_CONFIG_MAP,
    RMD_SERVER_SECRET,
    rmd_daemonset,
)
from intel_device_plugins.sim.rmd import (
    RmdState,
    VolumeSources,
    lay_out_container,
    load_config,
    parser,
    serve_rmd,
    server_tls,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "deploy" / "rmd" / "manager" / "rmd-config.yaml"


def _sources(ca: pki.Issued, client: pki.Issued) -> VolumeSources:
    config = yaml.safe_load(SHIPPED_CONFIG.read_text())
    assert config["metadata"]["name"] == RMD_CONFIG_MAP
    server = pki.new_server(ca)

    def secret(leaf: pki.Issued) -> dict[str, bytes]:
        return {"ca.crt": ca.cert, "tls.crt": leaf.cert, "tls.key": leaf.key}

    return {
        ("configMap", RMD_CONFIG_MAP): {k: v.encode() for k, v in config["data"].items()},
        ("secret", RMD_SERVER_SECRET): secret(server),
        ("secret", RMD_CLIENT_SECRET): secret(client),
    }


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_shipped_configuration_admits_the_client_certificate_only(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    ds = rmd_daemonset(parse(RmdConfigSpec, {}), {"name": "rmdconfig", "uid": "u"}, "intel-rmd", "node:1")
    pod = ds["spec"]["template"]["spec"]
    (rmd,) = [c for c in pod["containers"] if c["name"] == "rmd"]
    assert rmd["command"][0] == "/usr/bin/rmd" and "-d" not in rmd["command"] and "args" not in rmd
    ca = pki.new_ca()
    client = pki.new_client(ca, role="Guest")  # the subject does not matter in signature mode
    arguments = lay_out_container(pod, "rmd", _sources(ca, client), tmp_path)
    args = parser().parse_args(["--root", str(tmp_path), *arguments])
    cfg = load_config(args.conf_dir, tmp_path)
    assert not args.debug and not cfg.debug and cfg.acl.authorization == "signature"
    assert (cfg.address, cfg.tlsport, cfg.clientauth) == ("0.0.0.0", 8443, "challenge")
    tls = server_tls(cfg.clientcapath / "ca.pem", cfg.certpath / "rmd-cert.pem", cfg.certpath / "rmd-key.pem")
    async with serve_rmd(RmdState(), tls=tls, acl=cfg.acl) as url:
        operator = RmdClient(
            session, Transport(client_ssl_context(TlsMaterial(ca.cert, client.cert, client.key))), url
        )
        created = await operator.post_workload({"core_ids": ["0"], "rdt": {"cache": {"max": 1, "min": 1}}})
        assert created["status"] == "Successful"
        other = pki.new_client(ca, role="Admin")  # issued by the same CA, but not the mounted certificate
        stranger = RmdClient(
            session, Transport(client_ssl_context(TlsMaterial(ca.cert, other.cert, other.key))), url
        )
        with pytest.raises(RmdApiError) as err:
            await stranger.get_workloads()
        assert err.value.status == 401


def test_volume_items_stay_in_their_directory(tmp_path: Path) -> None:
    pod = {
        "containers": [
            {"name": "c", "command": ["/bin/x"], "volumeMounts": [{"name": "v", "mountPath": "/m"}]}
        ],
        "volumes": [
            {"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "../../escape"}]}}
        ],
    }
    with pytest.raises(ValueError, match="leaves"):
        lay_out_container(pod, "c", {("configMap", "cm"): {"k": b"x"}}, tmp_path)
