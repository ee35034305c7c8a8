"""Effective images: ``<IMAGE_NAME>_SHA`` overrides, the operator's plugin image, and version upgrades.

The rules are described in docs/operator.md, "Image overrides and upgrades".

The operator never rewrites the CR: it computes the *effective* images that go into the DaemonSet. The CR
stays the user's intent (GitOps tools see no drift) while operator upgrades still upgrade plugins.

Rules, first match wins (docs/install.md, "Image versions"):
1. ``<NAME>_SHA`` in the operator's environment replaces an image of that name (upstream's mechanism).
2. This project's node image with a semantic-version tag up to the operator's own version is deployed as
   the operator's plugin image (``DEVICEPLUGIN_IMAGE``): registry and tag follow the installation.
3. Upstream's plugin image for the kind with a tag up to :data:`UPSTREAM_VERSION` is deployed as the
   operator's plugin image too: this release is the drop-in replacement of that upstream release.
4. Any other image's semantic-version tag below :data:`UPSTREAM_VERSION` (upstream's init images) is
   raised to it, as upstream's controller did; images upstream stopped publishing earlier (DLB's, removed
   in 0.37.0) only to their last release (``images.upstream_floor``). Digests, newer tags and non-semver
   tags stay as written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from intel_device_plugins.operator import images
from intel_device_plugins.operator.imageref import SemVerError, parse_image, parse_semver
from intel_device_plugins.operator.spec import S


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


def plugin_image(env: Mapping[str, str]) -> str:
    """The operator's plugin image: ``DEVICEPLUGIN_IMAGE`` (flag or environment), else this release's."""
    return env.get(images.PLUGIN_IMAGE_ENV) or images.node_image()


def _up_to(tag: str, ceiling: str) -> bool | None:
    """Whether semver ``tag`` <= ``ceiling``; None when ``tag`` is no semantic version."""
    try:
        return parse_semver(tag) <= parse_semver(ceiling)
    except SemVerError:
        return None


def effective_image(
    image: str, env: Mapping[str, str], upstream_names: tuple[str, ...] = ()
) -> ImageDecision:
    """Apply this module's rules to ``image``; ``upstream_names``: the kind's upstream plugin names."""
    if not image:
        return ImageDecision(image)
    var = sha_env_name(image)
    override = env.get(var, "") if var else ""
    if override and override != image:
        return ImageDecision(override, f"{var} overrides the requested image {image}")
    ref = parse_image(image)
    if ref.digest or not ref.tag:
        return ImageDecision(image)
    ours = plugin_image(env)
    if ref.name == images.NODE_IMAGE_NAME and _up_to(ref.tag, images.PROJECT_VERSION):
        if image == ours:
            return ImageDecision(image)
        return ImageDecision(ours, f"{image} is deployed as the operator's plugin image {ours}")
    if ref.name in upstream_names and _up_to(ref.tag, images.UPSTREAM_VERSION):
        return ImageDecision(
            ours, f"{image} is upstream's release {images.UPSTREAM_VERSION} or older; deploying {ours}"
        )
    floor = images.upstream_floor(ref.name)
    below = _up_to(ref.tag, floor) and ref.tag != floor
    if below and ref.name != images.NODE_IMAGE_NAME:
        upgraded = ref.with_tag(floor)
        return ImageDecision(upgraded, f"tag {ref.tag} is below {floor}; upgraded to {upgraded}")
    return ImageDecision(image)


def effective_spec(spec: S, env: Mapping[str, str]) -> tuple[S, tuple[str, ...]]:
    """Spec with effective ``image`` and ``initImage``, plus the reasons for any change."""
    reasons: list[str] = []
    changes: dict[str, Any] = {}
    img = effective_image(
        spec.image or images.default_plugin_image(spec.KIND),
        env,
        (images.upstream_plugin_image_name(spec.KIND),),
    )
    if img.image != spec.image:
        changes["image"] = img.image
    if img.reason:
        reasons.append(img.reason)
    init = getattr(spec, "init_image", "")
    if init:
        d = effective_image(init, env)
        if d.reason:
            changes["init_image"] = d.image
            reasons.append(d.reason)
    return dataclasses.replace(spec, **changes), tuple(reasons)
