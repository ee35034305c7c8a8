"""Logging and its one ``-v`` ladder, shared by every command of this project.

The ladder is klog's, as upstream's binaries use it: 0 logs information, 4 and above also debug
messages, 6 and above also one line for every request to the API server.
"""

from __future__ import annotations

import argparse
import logging
from typing import Final

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DEBUG_FROM: Final = 4
API_REQUESTS_FROM: Final = 6

# The HTTP client logs one INFO line per request; with a Lease renewed every 2 s that buries
# everything else in the log.
HTTP_CLIENT_LOGGERS = ("httpx", "httpx2", "httpcore")


def add_verbosity_flag(parser: argparse.ArgumentParser) -> None:
    """``-v N`` (also ``--v``, ``--verbosity``): the shared logging flag of every command."""
    parser.add_argument(
        "-v",
        "--v",
        "--verbosity",
        dest="verbosity",
        type=int,
        default=0,
        help=f"log verbosity: 0 info, {DEBUG_FROM}+ debug, {API_REQUESTS_FROM}+ every API request",
    )


def configure_logging(verbosity: int) -> None:
    """Root logging on standard error at the level ``verbosity`` stands for on the ladder."""
    logging.basicConfig(level=logging.DEBUG if verbosity >= DEBUG_FROM else logging.INFO, format=LOG_FORMAT)
    requests = logging.DEBUG if verbosity >= API_REQUESTS_FROM else logging.WARNING
    for name in HTTP_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(requests)
