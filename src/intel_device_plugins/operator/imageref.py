"""Parsing of container image references and of semantic-version tags.

Upstream split references at the first ``:``, which breaks on registries with a port (``host:5000/…``). Here a
tag is only the part after the last ``:`` that follows the last ``/``, and a digest is split off first.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

_DIGEST_RE: Final = re.compile(r"^sha256:[0-9a-f]{64}$")
_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


@dataclasses.dataclass(frozen=True)
class ImageRef:
    """``repository[:tag][@digest]``; ``repository`` keeps any registry host and port."""

    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """Last path segment of the repository, e.g. ``intel-gpu-plugin``."""
        return self.repository.rsplit("/", 1)[-1]

    @property
    def has_valid_digest(self) -> bool:
        return bool(_DIGEST_RE.match(self.digest))

    def with_tag(self, tag: str) -> str:
        return f"{self.repository}:{tag}"


def parse_image(image: str) -> ImageRef:
    """Split an image reference into repository, tag and digest without any network lookups."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return ImageRef(rest[:colon], rest[colon + 1 :], digest)
    return ImageRef(rest, "", digest)


@dataclasses.dataclass(frozen=True, order=True)
class SemVer:
    """Semantic version with pre-release ordering (a pre-release sorts below its release)."""

    major: int
    minor: int
    patch: int
    release_rank: int  # 1 for a release, 0 for a pre-release
    pre: tuple[tuple[int, int | str], ...]

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            base += "-" + ".".join(str(p[1]) for p in self.pre)
        return base


class SemVerError(ValueError):
    pass


def parse_semver(text: str) -> SemVer:
    """Strict SemVer 2.0 parse (no ``v`` prefix, no leading zeros), as Kubernetes' ParseSemantic does."""
    m = _SEMVER_RE.match(text)
    if not m:
        raise SemVerError(f'"{text}" is not a semantic version (MAJOR.MINOR.PATCH)')
    pre: tuple[tuple[int, int | str], ...] = ()
    if m.group(4):
        pre = tuple((0, int(p)) if p.isdigit() else (1, p) for p in m.group(4).split("."))
    return SemVer(int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, pre)
