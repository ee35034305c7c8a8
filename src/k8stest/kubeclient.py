"""A deliberately small Kubernetes REST client for test infrastructure.

Why not a full client library: the tests need a handful of verbs (create, get, list, patch,
delete, TokenRequest) against a server we start ourselves, and they need the API server's own
status codes and messages unaltered (403s are what the RBAC tests assert). A few dozen lines over
``http.client`` do that, keep the dependency set small and make no global configuration.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

JSON = dict[str, Any]
T = TypeVar("T")


class ApiError(Exception):
    """A non-2xx answer from the API server, with its status code and Status message."""

    def __init__(self, status: int, reason: str, body: JSON | str) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        message = body.get("message", "") if isinstance(body, dict) else body
        super().__init__(f"{status} {reason}: {message}")


@dataclass(frozen=True)
class Credentials:
    """Where a server is and how to talk to it; also what a kubeconfig file holds."""

    server: str  # https://127.0.0.1:PORT
    ca_pem: bytes
    token: str
    user: str = "user"

    def kubeconfig(self, *, cluster: str = "k8stest", namespace: str | None = None) -> str:
        """Render a kubeconfig YAML for these credentials."""
        import base64

        context: JSON = {"cluster": cluster, "user": self.user}
        if namespace:
            context["namespace"] = namespace
        doc: JSON = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": self.user, "user": {"token": self.token}}],
            "contexts": [{"name": cluster, "context": context}],
            "current-context": cluster,
        }
        return str(yaml.safe_dump(doc, sort_keys=False))


class KubeClient:
    """JSON over HTTPS with a bearer token; one keep-alive connection per thread."""

    def __init__(self, creds: Credentials, *, timeout: float = 30.0) -> None:
        self.creds = creds
        self._timeout = timeout
        host_port = creds.server.removeprefix("https://").rstrip("/")
        host, _, port = host_port.rpartition(":")
        self._host = host
        self._port = int(port)
        self._ctx = ssl.create_default_context(cadata=creds.ca_pem.decode())
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, context=self._ctx, timeout=self._timeout
            )
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | list[Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> JSON:
        """Send one request; return the decoded JSON body or raise ApiError (a list body: JSON patch)."""
        headers = {"Authorization": f"Bearer {self.creds.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the server closed: retry once on a fresh one.
                self.close()
                if attempt == 2:
                    raise
        text = raw.decode(errors="replace")
        try:
            decoded: JSON | str = json.loads(text) if text else {}
        except json.JSONDecodeError:
            decoded = text
        if resp.status >= 300:
            raise ApiError(resp.status, resp.reason, decoded)
        return decoded if isinstance(decoded, dict) else {"text": decoded}

    def get(self, path: str) -> JSON:
        return self.request("GET", path)

    def create(self, path: str, obj: Mapping[str, Any]) -> JSON:
        return self.request("POST", path, obj)

    def delete(self, path: str) -> JSON:
        return self.request("DELETE", path)

    def delete_if_present(self, path: str) -> bool:
        """Delete, tolerating NotFound (idempotent clean-up); whether there was something to delete."""
        try:
            self.delete(path)
        except ApiError as e:
            if e.status != 404:
                raise
            return False
        return True

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> JSON:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def apply_ok(self, path: str, obj: Mapping[str, Any]) -> JSON:
        """Create, tolerating AlreadyExists (idempotent fixtures)."""
        try:
            return self.create(path, obj)
        except ApiError as e:
            if e.status != 409:
                raise
            return {}


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something other than None/False; fail with ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except (ApiError, OSError) as e:
            last_error = e
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
