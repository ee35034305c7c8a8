"""Process counters exported on /metrics in the Prometheus text format."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Metrics:
    """Counters exported on /metrics; owned by the process, passed explicitly."""

    reconciles: int = 0
    reconcile_errors: int = 0
    daemonset_applies: int = 0
    status_updates: int = 0
    admission_reviews: int = 0
    leader: int = 0

    def render(self) -> str:
        lines = []
        for f in dataclasses.fields(self):
            name = f"intel_deviceplugin_operator_{f.name}"
            kind = "gauge" if f.name == "leader" else "counter"
            lines += [f"# TYPE {name} {kind}", f"{name} {getattr(self, f.name)}"]
        return "\n".join(lines) + "\n"
