"""Logging set-up shared by the long-running commands that talk to the API server."""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The HTTP client logs one INFO line per request; with a Lease renewed every 2 s that buries
# everything else in the log.
HTTP_CLIENT_LOGGERS = ("httpx", "httpx2", "httpcore")


def configure_logging(level: int, *, http_requests: bool = False) -> None:
    """Root logging at ``level``; the HTTP client's per-request lines only if ``http_requests``."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for name in HTTP_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if http_requests else logging.WARNING)
