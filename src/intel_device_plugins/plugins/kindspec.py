"""The ``'<kind> <flags>'`` convention of the combined processes (``intel_device_plugins`` and
``intel_dra_drivers``), on its own so the DRA one does not import the device-plugin server."""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping

from intel_device_plugins.flags import GoFlagParser


def split_kind_spec(
    spec: str, option: str, kinds: Mapping[str, str], common: Collection[str], parser: GoFlagParser
) -> tuple[str, list[str]]:
    """``'qat -dpdk-driver vfio-pci'`` → (kind, its flags). An unknown kind or a flag given once for all
    kinds (``common``) is reported through ``parser`` (exit code 2), naming the ``option`` value; the
    device-plugin and DRA combined processes share this convention."""
    words = shlex.split(spec)
    if not words or words[0] not in kinds:
        parser.error(f"{option} {spec!r}: unknown kind; known kinds: {', '.join(kinds)}")
    for word in words[1:]:
        name = word.lstrip("-").split("=", 1)[0]
        if word.startswith("-") and name in common:
            parser.error(f"{option} {spec!r}: -{name} is common to all kinds; give it before {option}")
    return words[0], words[1:]
