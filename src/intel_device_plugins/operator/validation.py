"""Defaulting and validation of the device plugin CRs, as pure functions over the typed model.

The rules are described in docs/operator.md, "Admission webhooks".

Messages keep upstream's wording but always name the field, e.g. ``spec.image: incorrect image name …``.
Deliberate differences from upstream, each of which only accepts more:
- DLB and FPGA init images use the names the shipped images have (``…-initcontainer``); the legacy
  ``…-initimage`` names are still accepted. Upstream rejected its own samples.
- ``spec.image`` may name this project's node image (any kind) or upstream's image for the kind; the
  operator decides what it deploys for either (upgrade.py), and says so in a warning.
- FPGA ``initImage`` may be empty; the DaemonSet then uses the default FPGA init image.
- A semver tag below the minimum is accepted with a warning, as the controller deploys the minimum anyway;
  this lets CRs written for older operator releases apply unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from intel_device_plugins.operator import images
from intel_device_plugins.operator.imageref import SemVerError, parse_image, parse_semver
from intel_device_plugins.operator.images import (
    DEFAULT_IMAGE_PREFIX,
    NODE_IMAGE_NAME,
    UPSTREAM_VENDOR,
    UPSTREAM_VERSION,
    accepted_init_image_names,
    default_plugin_image,
    is_node_image,
    plugin_image_names,
)
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import AnySpec, FieldError, SpecError, parse_spec
from intel_device_plugins.operator.registry import profile_of

MESSAGE_PREFIX: Final = "invalid resource: "


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Outcome of validation: the errors that reject the CR and warnings that do not."""

    errors: tuple[FieldError, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.errors

    @property
    def message(self) -> str:
        return MESSAGE_PREFIX + "; ".join(str(e) for e in self.errors) if self.errors else ""


def default_spec(kind: DeviceKind, raw_spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """JSON patch-free defaulting: returns the spec with an empty ``image`` set to the default plugin image.

    Works on the raw JSON so fields this model does not know (none, after pruning) are preserved.
    """
    out = dict(raw_spec or {})
    if not out.get("image"):
        out["image"] = default_plugin_image(kind)
    return out


def check_image(
    path: str, image: str, accepted_names: tuple[str, ...]
) -> tuple[FieldError | None, str | None]:
    """Check one image reference; returns (error, warning)."""
    ref = parse_image(image)
    expected = accepted_names[0]
    if ref.digest:
        if not ref.has_valid_digest:
            return FieldError(
                path, f'incorrect image digest "{ref.digest}": expected sha256:<64 hex digits>'
            ), None
        if ref.name in accepted_names:
            return None, None
    if not ref.tag:
        return FieldError(path, f'incorrect image field "{image}"'), None
    if ref.name not in accepted_names:
        hint = (
            f"{DEFAULT_IMAGE_PREFIX}/{expected}"
            if expected == NODE_IMAGE_NAME
            else f"{UPSTREAM_VENDOR}/{expected}"
        )
        return FieldError(path, f"incorrect image name \"{ref.name}\". Make sure you use '{hint}'"), None
    try:
        version = parse_semver(ref.tag)
    except SemVerError as exc:
        return FieldError(path, f"{exc}: Make sure it's either valid SHA digest or semver tag"), None
    if ref.name == NODE_IMAGE_NAME:
        return None, None
    if ref.name in accepted_names[1:] and path == "spec.image" and version <= parse_semver(UPSTREAM_VERSION):
        return None, (
            f"{path}: {image} is upstream's plugin; the operator deploys its own plugin image "
            f"(upstream {UPSTREAM_VERSION} and older map to it; pin a digest to keep upstream's)"
        )
    floor = images.upstream_floor(ref.name)
    if version < parse_semver(floor):
        return None, (
            f'{path}: version "{ref.tag}" is lower than "{floor}"; the operator deploys {ref.with_tag(floor)}'
        )
    return None, None


def validate_spec(spec: AnySpec) -> Verdict:
    """The kind's own admission rules, then the image rules every kind shares; old objects are not
    consulted, so create and update agree."""
    kind = spec.KIND
    profile = profile_of(spec)
    errors, warnings = profile.validate(spec)
    if profile.dra is not None and profile.deploys_dra(spec):
        errors += profile.dra.unused_fields(spec)
        if spec.image and not is_node_image(spec.image):
            errors.append(
                FieldError(
                    "spec.image",
                    f"deployAs DRADriver needs this project's node image ({NODE_IMAGE_NAME}): "
                    f"{images.dra_driver_command(kind)} is in no other image",
                )
            )

    def image(path: str, value: str, names: tuple[str, ...]) -> None:
        err, warn = check_image(path, value, names)
        if err:
            errors.append(err)
        if warn:
            warnings.append(warn)

    init_names = accepted_init_image_names(kind)
    init_image = getattr(spec, "init_image", "")
    if init_image and init_names and profile.checks_init_image:
        image("spec.initImage", init_image, init_names)
    if not spec.image:
        errors.append(FieldError("spec.image", "must not be empty (the defaulting webhook sets it)"))
    else:
        image("spec.image", spec.image, plugin_image_names(kind))
    return Verdict(tuple(errors), tuple(warnings))


def validate_object(kind: DeviceKind, obj: Mapping[str, Any]) -> Verdict:
    """Validate a whole CR object (as received by the webhook): parse the spec, then apply the rules."""
    try:
        spec = parse_spec(kind, obj.get("spec"))
    except SpecError as exc:
        return Verdict(exc.errors)
    return validate_spec(spec)
