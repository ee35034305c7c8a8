"""Secure metrics: bearer tokens checked by TokenReview and SubjectAccessReview, cached, failing closed."""

from __future__ import annotations

from typing import Any, cast

import aiohttp
from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenReviewStatus, UserInfo
from lightkube.models.authorization_v1 import SubjectAccessReviewStatus
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

from intel_device_plugins.kube.https import metrics_app, start
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.metricsauth import CachedAuthorizer, api_authorizer, bearer_token


class FakeReviews:
    """Answers TokenReviews for token 'good'/'stranger' and SARs for user 'prometheus' only."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, obj: Any) -> Any:
        if isinstance(obj, TokenReview):
            self.calls.append("token")
            user = {"good": "prometheus", "stranger": "someone"}.get(obj.spec.token)
            obj.status = TokenReviewStatus(
                authenticated=user is not None, user=UserInfo(username=user, groups=["g"]) if user else None
            )
            return obj
        assert isinstance(obj, SubjectAccessReview)
        self.calls.append("sar")
        assert obj.spec.nonResourceAttributes is not None
        assert (obj.spec.nonResourceAttributes.path, obj.spec.nonResourceAttributes.verb) == (
            "/metrics",
            "get",
        )
        obj.status = SubjectAccessReviewStatus(allowed=obj.spec.user == "prometheus")
        return obj


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") == "" and bearer_token(None) == ""


async def test_api_authorizer_and_cache() -> None:
    api = FakeReviews()
    check = api_authorizer(cast(AsyncClient, api))
    assert await check("good") is True
    assert await check("stranger") is False
    assert await check("unknown") is False
    assert await check("") is False
    now = [0.0]
    cached = CachedAuthorizer(check, ttl_s=10, clock=lambda: now[0])
    api.calls.clear()
    assert await cached("good") and await cached("good")
    assert api.calls == ["token", "sar"]
    now[0] = 11.0
    assert await cached("good")
    assert api.calls == ["token", "sar", "token", "sar"]


async def test_metrics_endpoint_requires_authorised_token() -> None:
    async def authorizer(token: str) -> bool:
        if token == "boom":
            raise ConnectionError("api down")
        return token == "good"

    runner = await start(metrics_app(Metrics(reconciles=3), authorizer), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url) as r:
                assert r.status == 401
            for token, code in (("bad", 403), ("boom", 403), ("good", 200)):
                async with s.get(url, headers={"Authorization": f"Bearer {token}"}) as r:
                    assert r.status == code
                    if code == 200:
                        assert "intel_deviceplugin_operator_reconciles 3" in await r.text()
    finally:
        await runner.cleanup()
