"""The one error type of the bitstream library."""

from __future__ import annotations


class BitstreamError(ValueError):
    """A bitstream file that cannot be used; the message names the file and what is wrong.

    Every failure of the parsers — malformed, truncated, hostile or unreadable input — surfaces as
    this type, never as ``struct.error``, ``zlib.error``, ``RecursionError`` or ``OSError``.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
