"""The certificate rotation plan (rmd/rotation.py): its steps, their gates, and that no call fails."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography import x509

from intel_device_plugins.rmd import pki, rotation
from intel_device_plugins.rmd.client import RmdClient, TlsMaterial, Transport, client_ssl_context
from intel_device_plugins.rmd.model import RmdConfigSpec, parse
from intel_device_plugins.rmd.reconcile import (
    RMD_CLIENT_SECRET as CLIENT,
)
from intel_device_plugins.rmd.reconcile import (
    RMD_CONFIG_MAP,
    SERVER_TLS_ANNOTATION,
    rmd_daemonset,
    rolled_out,
)
from intel_device_plugins.rmd.reconcile import (
    RMD_SERVER_SECRET as SERVER,
)
from intel_device_plugins.rmd.rotation import (
    CA_KEY,
    CERT_KEY,
    NEXT_CERT,
    PREVIOUS_CERT,
    PRIVATE_KEY,
    Phase,
    RotationError,
    Step,
    Tls,
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

DAY = dt.timedelta(days=1)
SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "rmd" / "manager" / "rmd-config.yaml"


def installed(days: int = 90, key_type: pki.KeyType = "ecdsa") -> Tls:
    """What ``intel-rmd-certs`` writes."""
    validity = dt.timedelta(days=days)
    ca = pki.new_ca(key_type=key_type, validity=validity)
    server = pki.new_server(ca, key_type, validity=validity)
    client = pki.new_client(ca, key_type=key_type, validity=validity)
    return Tls(
        {CA_KEY: ca.cert, CERT_KEY: server.cert, "tls.key": server.key},
        {CA_KEY: ca.cert, CERT_KEY: client.cert, "tls.key": client.key},
    )


def step(tls: Tls, which: Step) -> Tls:
    new = rotation.issue(tls, 90 * DAY) if which is Step.TRUST else None
    return rotation.apply(which, tls, new)


def rotations(tls: Tls, count: int) -> list[Tls]:
    versions = [tls]
    for _ in range(count):
        for which in (Step.TRUST, Step.SWITCH, Step.DROP):
            versions.append(step(versions[-1], which))
    return versions


def chains(cert: bytes, bundle: bytes) -> bool:
    leaf = x509.load_pem_x509_certificate(cert)
    return any(rotation.issued_by(leaf, ca) for ca in x509.load_pem_x509_certificates(bundle))


def admitted(client_secret: rotation.SecretData) -> set[bytes]:
    """The admin directory the DaemonSet mounts from the client Secret."""
    return {client_secret[k] for k in (CERT_KEY, NEXT_CERT, PREVIOUS_CERT) if k in client_secret}


def test_every_client_certificate_in_use_is_trusted_by_every_rmd_at_every_step() -> None:
    """Version n is written only after RMD's rolling update for n-1 completed and every client reloaded n-1.

    So while n is the newest: RMD pods started at n-1 or n (they read the client CA and serve the server
    certificate of that version), see the admin directory of any version from their start to n (the kubelet
    updates it late), and clients use the certificate and bundle of n-1 or n. Every combination must work.
    """
    versions = rotations(installed(), 2)
    checked = 0
    for n, _ in enumerate(versions):
        recent = range(max(0, n - 1), n + 1)
        for pod_start, client in itertools.product(recent, recent):
            for admin in range(pod_start, n + 1):
                pod, seen, user = versions[pod_start], versions[admin], versions[client]
                where = f"version {n}: RMD started at {pod_start}, admin dir {admin}, client at {client}"
                assert chains(user.client[CERT_KEY], pod.server[CA_KEY]), f"client CA refuses ({where})"
                assert user.client[CERT_KEY] in admitted(seen.client), f"not in admin dir ({where})"
                assert chains(pod.server[CERT_KEY], user.client[CA_KEY]), f"client refuses RMD ({where})"
                checked += 1
    assert checked > 20


def test_a_rotation_ends_with_only_new_material() -> None:
    before = installed()
    trusting, switched, done = rotations(before, 1)[1:]
    assert [rotation.phase(v) for v in (before, trusting, switched, done)] == [
        Phase.STEADY,
        Phase.TRUSTING,
        Phase.SWITCHED,
        Phase.STEADY,
    ]
    assert len(x509.load_pem_x509_certificates(trusting.client[CA_KEY])) == 2
    assert done.client[CA_KEY] == done.server[CA_KEY]
    assert len(x509.load_pem_x509_certificates(done.client[CA_KEY])) == 1
    assert not chains(before.client[CERT_KEY], done.server[CA_KEY])
    assert admitted(done.client) == {done.client[CERT_KEY]} != {before.client[CERT_KEY]}
    assert set(done.server) == set(before.server) and set(done.client) == set(before.client)


def test_each_step_changes_what_rmd_reads_at_start() -> None:
    """Every step needs RMD restarted: the digest on its pod template changes each time."""
    digests = [rotation.server_material(v.server) for v in rotations(installed(), 1)]
    assert len(set(digests)) == len(digests)


def test_repeating_trust_after_a_half_written_step_does_not_pile_up_cas() -> None:
    tls = installed()
    once = step(tls, Step.TRUST)
    half = Tls(once.server, tls.client)  # the server Secret was written, the client Secret was not
    again = step(half, Step.TRUST)
    assert len(x509.load_pem_x509_certificates(again.server[CA_KEY])) == 2


def test_rsa_material_is_renewed_as_rsa() -> None:
    trusting = step(installed(key_type="rsa"), Step.TRUST)
    key = x509.load_pem_x509_certificate(trusting.client[NEXT_CERT]).public_key()
    assert type(key).__name__.startswith("_RSA") or "RSA" in type(key).__name__


def decide(tls: Tls, now: dt.datetime, rollout_done: bool = True, age_s: float = 1e9) -> rotation.Decision:
    return rotation.next_step(tls, now, rollout_done, age_s, 300.0)


def test_renewal_waits_until_a_third_of_the_lifetime_is_left() -> None:
    tls = installed(days=90)
    now = dt.datetime.now(dt.UTC)
    early = decide(tls, now + 59 * DAY)
    assert early.step is None and 0 < early.look_again_s <= DAY.total_seconds()
    assert decide(tls, now + 61 * DAY).step is Step.TRUST
    asked = rotation.next_step(tls, now, True, 1e9, 300.0, requested=True)
    assert asked.step is Step.TRUST and "requested" in asked.reason


def test_later_steps_wait_for_the_rolling_update_and_the_clients() -> None:
    now = dt.datetime.now(dt.UTC)
    trusting = step(installed(), Step.TRUST)
    assert decide(trusting, now, rollout_done=False).step is None
    waiting = decide(trusting, now, age_s=100)
    assert waiting.step is None and waiting.look_again_s == pytest.approx(200)
    assert decide(trusting, now).step is Step.SWITCH
    switched = step(trusting, Step.SWITCH)
    assert decide(switched, now, rollout_done=False).step is None
    assert decide(switched, now).step is Step.DROP


def test_unreadable_secrets_are_named_and_left_alone() -> None:
    tls = installed()
    with pytest.raises(RotationError, match=f"Secret {CLIENT}: no tls.crt"):
        decide(
            Tls(tls.server, {k: v for k, v in tls.client.items() if k != CERT_KEY}), dt.datetime.now(dt.UTC)
        )
    with pytest.raises(RotationError, match=f"Secret {SERVER}: tls.crt is not a PEM certificate"):
        decide(Tls({**tls.server, CERT_KEY: b"junk"}, tls.client), dt.datetime.now(dt.UTC))


def test_rolled_out_needs_every_pod_updated_with_the_digest() -> None:
    ds = rmd_daemonset(parse(RmdConfigSpec, {}), {"name": "rmdconfig", "uid": "u"}, "intel-rmd", "n:1", "d1")
    assert ds["spec"]["template"]["metadata"]["annotations"] == {SERVER_TLS_ANNOTATION: "d1"}
    ds["metadata"]["generation"] = 2
    done = {"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3}
    assert rolled_out({**ds, "status": {**done, "numberAvailable": 3}}, "d1")
    assert not rolled_out({**ds, "status": {**done, "numberAvailable": 3}}, "d2")
    assert not rolled_out({**ds, "status": {**done, "numberAvailable": 2, "numberUnavailable": 1}}, "d1")
    assert not rolled_out({**ds, "status": {**done, "updatedNumberScheduled": 2, "numberAvailable": 3}}, "d1")
    assert not rolled_out({**ds, "status": {**done, "observedGeneration": 1, "numberAvailable": 3}}, "d1")


async def test_rmd_laid_out_from_the_daemonset_admits_both_client_certificates_mid_rotation(
    tmp_path: Path,
) -> None:
    """The admin directory the DaemonSet mounts holds ``next.crt`` (then ``previous.crt``) beside ``tls.crt``;
    RMD started mid-rotation trusts both CAs, so the old and the new client certificate both get in."""
    config = yaml.safe_load(SHIPPED_CONFIG.read_text())
    ds = rmd_daemonset(parse(RmdConfigSpec, {}), {"name": "rmdconfig", "uid": "u"}, "intel-rmd", "n:1")
    pod = ds["spec"]["template"]["spec"]
    before, trusting, switched, _ = rotations(installed(), 1)
    old = (before.client[CERT_KEY], before.client[PRIVATE_KEY])
    new = (switched.client[CERT_KEY], switched.client[PRIVATE_KEY])
    assert trusting.client[NEXT_CERT] == new[0]
    for version in (trusting, switched):
        sources: VolumeSources = {
            ("configMap", RMD_CONFIG_MAP): {k: v.encode() for k, v in config["data"].items()},
            ("secret", SERVER): version.server,
            ("secret", CLIENT): version.client,
        }
        root = tmp_path / rotation.phase(version).value
        args = parser().parse_args(["--root", str(root), *lay_out_container(pod, "rmd", sources, root)])
        cfg = load_config(args.conf_dir, root)
        tls = server_tls(
            cfg.clientcapath / "ca.pem", cfg.certpath / "rmd-cert.pem", cfg.certpath / "rmd-key.pem"
        )
        async with aiohttp.ClientSession() as session, serve_rmd(RmdState(), tls=tls, acl=cfg.acl) as url:
            for cert, key in (old, new):
                material = TlsMaterial(version.client[CA_KEY], cert, key)
                rmd = RmdClient(session, Transport(client_ssl_context(material)), url)
                assert await rmd.get_workloads() == [], rotation.phase(version)


def test_switch_repeated_after_a_half_written_step_completes_it() -> None:
    trusting = step(installed(), Step.TRUST)
    switched = step(trusting, Step.SWITCH)
    half = Tls(switched.server, trusting.client)  # the server Secret was written, the client Secret was not
    assert step(half, Step.SWITCH) == switched
    with pytest.raises(RotationError, match=f"Secret {SERVER}: no next.crt"):
        step(Tls(installed().server, trusting.client), Step.SWITCH)  # a server certificate from elsewhere
