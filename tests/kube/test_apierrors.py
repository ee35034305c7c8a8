"""Status codes are read from lightkube's ApiError and from plain HTTP status errors alike."""

from __future__ import annotations

import types

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from intel_device_plugins.kube.apierrors import is_status, status_code


def test_status_code_sources() -> None:
    assert status_code(ApiError(status=Status(code=404, message="gone"))) == 404
    plain = Exception("404 Not Found")
    plain.response = types.SimpleNamespace(status_code=409)  # type: ignore[attr-defined]
    assert status_code(plain) == 409 and is_status(plain, 404, 409)
    assert status_code(ConnectionError("refused")) is None
    assert not is_status(ConnectionError(), 404)
