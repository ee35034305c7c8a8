"""Authentication and authorisation of /metrics scrapes with ``--metrics-secure`` (TokenReview + SAR).

A scraper presents a bearer token; the API server says who it is (TokenReview) and whether that identity may
``get`` the non-resource URL ``/metrics`` (SubjectAccessReview). Answers are cached briefly so a scrape
interval does not turn into two API calls per scrape.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.models.authorization_v1 import NonResourceAttributes, SubjectAccessReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from lightkube.resources.authorization_v1 import SubjectAccessReview

CACHE_S: Final = 60.0
Authorizer = Callable[[str], Awaitable[bool]]


def bearer_token(header: str | None) -> str:
    """Token from an ``Authorization`` header, or "" when there is none."""
    if not header:
        return ""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class CachedAuthorizer:
    """Wraps a token check with a small time-bounded cache (positive and negative answers alike)."""

    def __init__(
        self,
        check: Authorizer,
        ttl_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 256,
    ) -> None:
        self._check = check
        self._ttl = ttl_s
        self._clock = clock
        self._max = max_entries
        self._cache: dict[str, tuple[float, bool]] = {}

    async def __call__(self, token: str) -> bool:
        now = self._clock()
        hit = self._cache.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        allowed = await self._check(token)
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[token] = (now + self._ttl, allowed)
        return allowed


def api_authorizer(client: AsyncClient, path: str = "/metrics") -> Authorizer:
    """Token check against the API server: authenticated, and allowed to ``get`` ``path``."""

    async def check(token: str) -> bool:
        if not token:
            return False
        review = await client.create(TokenReview(spec=TokenReviewSpec(token=token)))
        st = review.status
        if st is None or not st.authenticated or st.user is None:
            return False
        sar = await client.create(
            SubjectAccessReview(
                spec=SubjectAccessReviewSpec(
                    user=st.user.username,
                    groups=st.user.groups,
                    uid=st.user.uid,
                    extra=st.user.extra,
                    nonResourceAttributes=NonResourceAttributes(path=path, verb="get"),
                )
            )
        )
        return bool(sar.status and sar.status.allowed)

    return check
