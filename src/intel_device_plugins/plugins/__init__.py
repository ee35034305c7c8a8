"""Device plugins, one sub-package per kind.

A plugin process never needs Python's TLS: it talks to the kubelet over unix sockets, and gRPC
brings its own TLS library. ``asyncio`` imports the ``ssl`` module whenever it can, and loading
OpenSSL that way costs about 4.5 MiB of resident memory per process (docs/performance.md,
"Memory"). So when a plugin binary starts (this package is the first thing its console script
imports), ``ssl`` is marked unavailable before ``asyncio`` loads; ``asyncio`` then simply has no TLS
support. Any other program that imports this package (tests, the operator, the hooks) is left alone.
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


if "ssl" not in sys.modules and sys.argv and is_plugin_binary(sys.argv[0]):
    sys.modules["ssl"] = None  # type: ignore[assignment]
