"""Image overrides from ``<IMAGE_NAME>_SHA`` environment variables and automatic version upgrades (§1.6).

The operator never rewrites the CR: it computes the *effective* images that go into the DaemonSet. The CR
stays the user's intent (GitOps tools see no drift) while operator upgrades still upgrade plugins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from intel_device_plugins.operator.imageref import SemVerError, parse_image, parse_semver
from intel_device_plugins.operator.images import PLUGIN_IMAGE_VERSION
from intel_device_plugins.operator.model import S


def sha_env_name(image: str) -> str | None:
    """Name of the override variable for ``image``, e.g. ``INTEL_SGX_PLUGIN_SHA``; None for an empty image."""
    if not image:
        return None
    name = parse_image(image).name
    if not name:
        return None
    return name.upper().replace("-", "_").replace(".", "_") + "_SHA"


@dataclasses.dataclass(frozen=True)
class ImageDecision:
    """Effective image and why it differs from the requested one (empty reason: unchanged)."""

    image: str
    reason: str = ""


def effective_image(
    image: str, env: Mapping[str, str], min_version: str = PLUGIN_IMAGE_VERSION
) -> ImageDecision:
    """Apply the ``_SHA`` override, else lift a semver tag below ``min_version``; others stay."""
    if not image:
        return ImageDecision(image)
    var = sha_env_name(image)
    override = env.get(var, "") if var else ""
    if override and override != image:
        return ImageDecision(override, f"{var} overrides the requested image {image}")
    ref = parse_image(image)
    if ref.digest or not ref.tag:
        return ImageDecision(image)
    try:
        tag = parse_semver(ref.tag)
    except SemVerError:
        return ImageDecision(image)
    if tag < parse_semver(min_version):
        upgraded = ref.with_tag(min_version)
        return ImageDecision(upgraded, f"tag {ref.tag} is below {min_version}; upgraded to {upgraded}")
    return ImageDecision(image)


def effective_spec(spec: S, env: Mapping[str, str]) -> tuple[S, tuple[str, ...]]:
    """Spec with effective ``image`` and ``initImage``, plus the reasons for any change."""
    reasons: list[str] = []
    changes: dict[str, Any] = {}
    img = effective_image(spec.image, env)
    if img.reason:
        changes["image"] = img.image
        reasons.append(img.reason)
    init = getattr(spec, "init_image", "")
    if init:
        d = effective_image(init, env)
        if d.reason:
            changes["init_image"] = d.image
            reasons.append(d.reason)
    return dataclasses.replace(spec, **changes), tuple(reasons)
