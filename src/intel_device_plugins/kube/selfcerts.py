"""No-cert-manager mode: keep the serving certificate in a Secret, on disk and in the webhook configs.

Any replica may renew: the Secret is replaced with its resourceVersion, so of two racing replicas one wins and
the other re-reads. The CA bundle patch is idempotent, so every replica applies it. The Secret never holds a
CA private key (see ``certs``); one left there by an earlier version is removed by an immediate re-issue.

Parsing, checking and issuing certificates need cryptography, which costs the process about 8 MiB of RSS for
good; they run in a short-lived child process (``python -m intel_device_plugins.kube.certs``) instead, and
only when the Secret has changed or its renewal time has come.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from intel_device_plugins.kube.apierrors import is_status
from intel_device_plugins.kube.certdata import CertBundle, ca_bundle_patch
from intel_device_plugins.kube.https import CERT_FILE, KEY_FILE
from intel_device_plugins.kube.watch import follow

log = logging.getLogger(__name__)
CHILD_TIMEOUT_S = 60.0


async def certificate_request(request: dict[str, Any]) -> dict[str, Any]:
    """Run one ``certs.handle_request`` in a child process (which alone imports cryptography)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "intel_device_plugins.kube.certs",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), CHILD_TIMEOUT_S)
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"certificate helper exited with {proc.returncode}: {err.decode()[-500:]}")
    answer: dict[str, Any] = json.loads(out)
    if "error" in answer:
        raise RuntimeError(f"certificate helper: {answer['error']}")
    return answer


def write_pair(cert_dir: Path, bundle: CertBundle) -> None:
    """Write tls.crt/tls.key atomically (rename), so the reloader never sees half a pair."""
    cert_dir.mkdir(parents=True, exist_ok=True)
    for name, data in ((KEY_FILE, bundle.tls_key), (CERT_FILE, bundle.tls_cert)):
        tmp = cert_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.chmod(0o600)
        tmp.replace(cert_dir / name)


@dataclasses.dataclass(frozen=True)
class SelfManagedConfig:
    namespace: str
    secret: str
    dns_names: tuple[str, ...]
    configurations: tuple[str, ...]
    cert_dir: Path


class SelfManagedCerts:
    """Creates, renews and distributes the webhook certificate."""

    def __init__(self, client: AsyncClient, config: SelfManagedConfig) -> None:
        self.client = client
        self.cfg = config
        # (resourceVersion, renewal due) of the Secret last found good, so a check needs no child process
        self._good: tuple[str, dt.datetime] | None = None

    async def _read(self) -> tuple[Secret | None, CertBundle | None]:
        try:
            secret = await self.client.get(Secret, self.cfg.secret, namespace=self.cfg.namespace)
        except Exception as exc:
            if is_status(exc, 404):
                return None, None
            raise
        return secret, CertBundle.from_secret_data(secret.data)

    def _known_good(self, secret: Secret, now: dt.datetime) -> bool:
        version = secret.metadata.resourceVersion if secret.metadata else None
        return self._good is not None and version == self._good[0] and now < self._good[1]

    async def _renewal_reason(self, secret: Secret | None, now: dt.datetime) -> str:
        if secret is None:
            return "no certificate yet"
        if self._known_good(secret, now):
            return ""
        answer = await certificate_request(
            {"op": "check", "data": secret.data, "dns": list(self.cfg.dns_names), "now": now.isoformat()}
        )
        reason = str(answer["reason"])
        if not reason and secret.metadata and secret.metadata.resourceVersion:
            due = now + dt.timedelta(seconds=float(answer["next_check_s"]))
            self._good = (secret.metadata.resourceVersion, due)
        return reason

    def next_check_s(self, now: dt.datetime, ceiling_s: float = 300.0) -> float:
        """Seconds until the stored certificate should be looked at again."""
        if self._good is None:
            return 1.0
        return max(1.0, min((self._good[1] - now).total_seconds(), ceiling_s))

    async def ensure(self, now: dt.datetime | None = None) -> CertBundle:
        """Make sure a good bundle is stored, on disk and injected; returns it."""
        now = now or dt.datetime.now(dt.UTC)
        for _ in range(5):
            secret, bundle = await self._read()
            reason = await self._renewal_reason(secret, now)
            if not reason and bundle is not None:
                break
            log.info("issuing webhook certificate: %s", reason)
            answer = await certificate_request(
                {
                    "op": "issue",
                    "data": secret.data if secret is not None else None,
                    "dns": list(self.cfg.dns_names),
                    "now": now.isoformat(),
                }
            )
            data: dict[str, str] = answer["data"]
            fresh = CertBundle.from_secret_data(data)
            assert fresh is not None
            try:
                if secret is None:
                    stored = await self.client.create(
                        Secret(
                            metadata=ObjectMeta(name=self.cfg.secret, namespace=self.cfg.namespace),
                            type="Opaque",
                            data=data,
                        )
                    )
                else:
                    secret.data = data
                    stored = await self.client.replace(secret)
            except Exception as exc:
                if is_status(exc, 409):  # another replica renewed first: use theirs
                    continue
                if secret is None and is_status(exc, 403):
                    raise RuntimeError(self._cannot_create()) from exc
                raise
            version = stored.metadata.resourceVersion if stored is not None and stored.metadata else None
            if version:
                self._good = (version, now + dt.timedelta(seconds=float(answer["next_check_s"])))
            bundle = fresh
            break
        else:
            raise RuntimeError("could not store the webhook certificate after 5 attempts")
        # Publish the CA bundle (new and previous CA) before serving the new certificate, so the API server
        # trusts whichever of the two it is offered.
        await self.inject(bundle)
        write_pair(self.cfg.cert_dir, bundle)
        return bundle

    def _cannot_create(self) -> str:
        ns, name = self.cfg.namespace, self.cfg.secret
        return (
            f"Secret {ns}/{name} is missing and creating it is forbidden: grant the ServiceAccount "
            f"`create` on secrets in namespace {ns} (the self-signed installs' cert-role does), or re-apply "
            f"the install, which ships the Secret {name} empty"
        )

    async def inject(self, bundle: CertBundle) -> None:
        """Set caBundle on every webhook of the named configurations (whichever kind each one is)."""
        for name in self.cfg.configurations:
            await self._inject_one(name, bundle)

    async def _inject_one(self, name: str, bundle: CertBundle) -> None:
        kinds: Sequence[Any] = (MutatingWebhookConfiguration, ValidatingWebhookConfiguration)
        for res in kinds:
            try:
                obj = await self.client.get(res, name)
            except Exception as exc:
                if is_status(exc, 403, 404):
                    continue
                raise
            ops = ca_bundle_patch(obj.to_dict(), bundle.ca_bundle())
            if ops:
                await self.client.patch(res, name, ops, patch_type=PatchType.JSON)
                log.info("injected CA bundle into %s %s", res.__name__, name)
            return
        log.warning("webhook configuration %s not found", name)

    def _stored_version(self) -> str | None:
        return self._good[0] if self._good is not None else None

    async def follow_secret(self, changed: asyncio.Event) -> None:
        """Set ``changed`` whenever the Secret is not the one last found good: replaced, re-created or
        deleted by another replica or by hand. Our own writes come back with the version we stored."""
        name = self.cfg.secret

        def on_event(event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            if meta.get("name") != name:
                return
            if event == "DELETED" or meta.get("resourceVersion") != self._stored_version():
                changed.set()

        def on_list(objects: Sequence[dict[str, Any]]) -> None:
            mine = [obj for obj in objects if (obj.get("metadata") or {}).get("name") == name]
            if not mine:
                changed.set()  # deleted while the watch was away
            for obj in mine:
                on_event("ADDED", obj)

        await follow(
            self.client,
            Secret,
            on_list,
            on_event,
            namespace=self.cfg.namespace,
            fields={"metadata.name": name},
            shape=lambda obj: {"metadata": obj.get("metadata") or {}},  # the key stays out of the cache
        )

    async def run(self) -> None:
        """Keep the certificate fresh forever; errors are retried, never fatal.

        Looks again as soon as the Secret changes (a watch on it), so every replica writes, and its server
        reloads, a certificate re-issued by another within seconds; the periodic check stays as a backstop.
        """
        changed = asyncio.Event()
        follower = asyncio.create_task(self.follow_secret(changed))
        delay = 1.0
        try:
            while True:
                changed.clear()
                try:
                    await self.ensure()
                    # Look again within minutes even when nothing is due: a re-applied webhook
                    # configuration may have lost its CA bundle.
                    delay = self.next_check_s(dt.datetime.now(dt.UTC))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("certificate maintenance failed: %s", exc)
                    delay = min(max(delay * 2, 2.0), 60.0)
                    changed.clear()  # a failed attempt waits out its delay: no retry storm on events
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), delay)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
