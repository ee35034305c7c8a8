"""Device plugins, one sub-package per kind.

A plugin process hardly ever needs Python's TLS: it talks to the kubelet over unix sockets in plain
HTTP/2. ``asyncio`` and grpclib import the ``ssl`` module whenever they can, and loading OpenSSL that
way costs about 4.5 MiB of resident memory per process (docs/performance.md, "Memory"). So when a
plugin binary starts (this package is the first thing its console script imports), ``asyncio`` and
grpclib's client and server are loaded while ``ssl`` cannot be imported; they then simply have no TLS
support. Code that needs TLS later can still import ``ssl``. Any other program that imports this
package (tests, the operator, the hooks) is left alone.
"""

from __future__ import annotations

import os
import sys

PLUGIN_BINARY_SUFFIX = "_device_plugin"
COMBINED_BINARY = "intel_device_plugins"


def is_plugin_binary(argv0: str) -> bool:
    """``intel_<kind>_device_plugin`` or the combined ``intel_device_plugins``."""
    name = os.path.basename(argv0)
    return name.endswith(PLUGIN_BINARY_SUFFIX) or name == COMBINED_BINARY


def load_asyncio_without_ssl() -> None:
    """Import ``asyncio`` and grpclib while ``ssl`` cannot be imported, then make ``ssl`` importable
    again (both import it only if they can).

    They stay without TLS support; a plugin that does need TLS later (the FPGA plugin asks
    the API server for its node's annotations when told to) still imports ``ssl`` and pays for it.
    """
    sys.modules["ssl"] = None  # type: ignore[assignment]
    try:
        import asyncio  # noqa: F401

        import grpclib.client
        import grpclib.server  # noqa: F401
    finally:
        del sys.modules["ssl"]


if "ssl" not in sys.modules and "asyncio" not in sys.modules and sys.argv and is_plugin_binary(sys.argv[0]):
    load_asyncio_without_ssl()
