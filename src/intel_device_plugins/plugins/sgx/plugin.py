"""The SGX plugin: rescanning cheaply and serving the limits' device tree."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.sgx.discovery import NAMESPACE, SgxLimits, sgx_present, sgx_tree
from intel_device_plugins.sysfs import prefixed

log = logging.getLogger(__name__)


@dataclass
class SgxPlugin:
    """Rescans (cheaply: two ``stat`` calls) when SGX appears or goes away.

    The tree only depends on whether the nodes exist, so it is built once per state and the same
    object is returned while nothing changes.
    """

    limits: SgxLimits
    prefix: str = ""
    problems: ProblemLog = field(default_factory=lambda: ProblemLog(log))
    _trees: dict[bool, DeviceTree] = field(default_factory=dict, init=False, repr=False)

    @property
    def namespace(self) -> str:
        return NAMESPACE

    def scan(self) -> DeviceTree:
        present, problems = sgx_present(self.prefix)
        self.problems.report(problems)
        if present not in self._trees:
            self._trees[present] = sgx_tree(self.prefix, self.limits, present)
        return self._trees[present]

    def watch_paths(self) -> Sequence[Path]:
        """The two nodes live directly in ``/dev``."""
        return (prefixed(self.prefix, "/dev"),)

    def uevent_subsystems(self) -> Collection[str]:
        """The nodes are ``misc`` devices of the in-kernel driver, created once when it initialises.

        The scan reads nothing else, so the plugin rescans only on those events and node changes.
        """
        return ("misc",)
