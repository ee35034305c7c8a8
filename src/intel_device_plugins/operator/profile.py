"""The one interface every device kind implements (one module per kind under ``operator/kinds/``).

A profile is data plus pure functions: the kind's spec class, its DaemonSet template, its plugin arguments,
init containers and admission rules. The kind-neutral assembly (``daemonset.py``, ``validation.py``,
``combined.py``) asks the profile and never tests which kind it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Generic

from intel_device_plugins.kube.crdmodel import EMPTY
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.pod import JSON, HostMount, KindTemplate
from intel_device_plugins.operator.spec import DEPLOY_AS_DRA, FieldError, S

InitParts = tuple[list[JSON], list[JSON]]
"""Init containers and the extra pod volumes they need."""

Findings = tuple[list[FieldError], list[str]]
"""Errors that reject a CR and warnings that do not."""


def no_init(spec: object) -> InitParts:
    return [], []


def no_rules(spec: object) -> Findings:
    return [], []


def no_args(spec: object) -> list[str]:
    return []


def no_mounts(spec: object) -> tuple[HostMount, ...]:
    return ()


@dataclasses.dataclass(frozen=True)
class DraTemplate(Generic[S]):
    """The kind's DRA driver: what its DaemonSet runs when the CR says ``deployAs: DRADriver``.

    The driver's pod is the same for every kind but for these parts: the host mounts (``pod.DRA_MOUNTS``),
    the flags naming them and the ServiceAccount are shared; the kind's init containers are its plugin's.
    """

    requests: tuple[str, str]  # memory, cpu
    limits: tuple[str, str]
    unused_fields: Callable[[S], list[FieldError]]
    """Spec fields that mean something to the device plugin only; a DRADriver CR setting them is rejected."""
    args: Callable[[S], list[str]] = no_args
    """The kind's own driver flags, after the shared DRA flags (named as the kind's plugin names them)."""
    mounts: Callable[[S], tuple[HostMount, ...]] = no_mounts
    """Host paths the kind's driver writes beyond the shared ones (mounted over the read-only /sys)."""


@dataclasses.dataclass(frozen=True)
class KindProfile(Generic[S]):
    """Everything the kind-neutral code needs to know about one device kind."""

    spec_class: type[S]
    template: KindTemplate
    plugin_args: Callable[[S], list[str]]
    """The kind's own plugin arguments, after the common ``-v``; one list element per flag and per value."""
    init_parts: Callable[[S], InitParts] = no_init
    validate: Callable[[S], Findings] = no_rules
    """Kind-specific admission rules, checked before the image rules every kind shares."""
    main_mounts: Callable[[S], tuple[HostMount, ...]] | None = None
    """The plugin container's mounts when they depend on the spec; None: the template's."""
    forced_node_selector: Mapping[str, str] = dataclasses.field(default_factory=lambda: EMPTY)
    """Labels added to every node selector, the CR's own included."""
    late_volumes: tuple[str, ...] = ()
    """Plugin volumes listed after the init containers' volumes (upstream's order)."""
    checks_init_image: bool = True
    """Whether ``spec.initImage`` is checked against the kind's accepted init image names."""
    plugin_service_account: bool = False
    """Whether the plugin pods run under the operator's plugin ServiceAccount (the plugin reads its node)."""
    reinvoke_defaulting: bool = False
    """Whether the CR's defaulting webhook is called again after later mutations (``reinvocationPolicy``)."""
    dra: DraTemplate[S] | None = None
    """The kind's DRA driver, for kinds whose spec has ``deployAs``; None: device plugin only."""

    @property
    def kind(self) -> DeviceKind:
        return self.spec_class.KIND

    def deploys_dra(self, spec: S) -> bool:
        """Whether the CR's DaemonSet runs the kind's DRA driver instead of its device plugin."""
        return self.dra is not None and getattr(spec, "deploy_as", "") == DEPLOY_AS_DRA

    def mounts(self, spec: S) -> tuple[HostMount, ...]:
        return self.main_mounts(spec) if self.main_mounts is not None else self.template.mounts


def no_fields(spec: object) -> list[FieldError]:
    """A kind whose every spec field means the same to its DRA driver."""
    return []


def shared_dev_num_unused(shared_dev_num: int, why: str) -> list[FieldError]:
    """``sharedDevNum`` above 1 has no DRA counterpart (1, upstream samples' value, means no sharing)."""
    if shared_dev_num > 1:
        return [FieldError("spec.sharedDevNum", f"means nothing for deployAs DRADriver: {why}")]
    return []


def count_arg(value: int, default: int) -> str:
    """A numeric plugin flag: the spec's value, or the plugin's default when the spec leaves it at 0."""
    return str(value if value else default)


def provisioning_needs_init_image(provisioning_config: str, init_image: str) -> list[FieldError]:
    """The rule of every kind whose init container applies a provisioning ConfigMap."""
    if provisioning_config and not init_image:
        return [FieldError("spec.initImage", "ProvisioningConfig is set with no InitImage")]
    return []
