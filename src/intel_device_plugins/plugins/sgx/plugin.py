"""The SGX plugin: rescanning cheaply and serving the limits' device tree."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.problems import ProblemLog
from intel_device_plugins.plugins.sgx.discovery import NAMESPACE, SgxLimits, sgx_present, sgx_tree

log = logging.getLogger(__name__)


@dataclass
class SgxPlugin:
    """Rescans (cheaply: two ``stat`` calls) so SGX appearing or going away is noticed.

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
