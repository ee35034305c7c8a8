"""Interface and AFU IDs as they appear in file names under the bitstream store."""

from __future__ import annotations

import re

BITSTREAM_DIR = "/srv/intel.com/fpga"
"""Where bitstreams are installed: ``<dir>/<interface ID>/<AFU ID>.gbs`` or ``<hash>.aocx``."""
MAX_ID_LENGTH = 128
_SAFE_ID = re.compile(r"^[0-9a-z]+$")


def canonical_id(value: str) -> str:
    """The form IDs are compared and stored in: trimmed, without dashes, lower-case."""
    return value.strip().replace("-", "").lower()


def is_safe_id(value: str) -> bool:
    """True when ``value`` can be one path component under the store and nothing else.

    UUIDs and AOCX hashes are hexadecimal; anything with a dot, a slash or another separator could
    name a different directory (``..``) and is refused rather than cleaned up.
    """
    return 0 < len(value) <= MAX_ID_LENGTH and _SAFE_ID.match(value) is not None
