"""The cluster's AcceleratorFunctions and FpgaRegions as the FPGA webhook needs them, kept by the watcher.

Only names and specs are stored. Mappings are computed per namespace from the stored objects when asked and
cached until an object of that namespace changes, so a pod only ever sees the mappings of its own namespace.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from intel_device_plugins.webhooks.fpga import NamespaceMappings, namespace_mappings

GROUP: Final = "fpga.intel.com"
VERSION: Final = "v2"
log = logging.getLogger(__name__)


class FpgaKind(enum.Enum):
    ACCELERATOR_FUNCTION = ("AcceleratorFunction", "acceleratorfunctions", "acceleratorfunction", "af")
    FPGA_REGION = ("FpgaRegion", "fpgaregions", "fpgaregion", "fpga")

    @property
    def kind(self) -> str:
        return self.value[0]

    @property
    def plural(self) -> str:
        return self.value[1]

    @property
    def singular(self) -> str:
        return self.value[2]

    @property
    def short_name(self) -> str:
        return self.value[3]


def _slim(obj: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    meta, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return None
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    return namespace, name, {"metadata": {"name": name}, "spec": dict(spec)}


class MappingStore:
    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        """``on_change`` is called after any listing or event (the DeviceClass sync listens)."""
        self._objects: dict[FpgaKind, dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in FpgaKind}
        self._cache: dict[str, NamespaceMappings] = {}
        self._synced: set[FpgaKind] = set()
        self._on_change = on_change or (lambda: None)

    @property
    def synced(self) -> bool:
        """Both kinds have been listed once: until then a pod could be denied for a mapping not yet seen."""
        return len(self._synced) == len(FpgaKind)

    def replace(self, kind: FpgaKind, objs: Iterable[Mapping[str, Any]]) -> None:
        """Take a full listing of ``kind`` (after a (re)connect); objects missing from it are gone."""
        fresh = {}
        for obj in objs:
            slim = _slim(obj)
            if slim is not None:
                fresh[(slim[0], slim[1])] = slim[2]
        changed = {ns for ns, _ in fresh.keys() ^ self._objects[kind].keys()}
        changed |= {key[0] for key, v in fresh.items() if self._objects[kind].get(key) != v}
        self._objects[kind] = fresh
        self._synced.add(kind)
        for ns in changed:
            self._cache.pop(ns, None)
        self._on_change()

    def upsert(self, kind: FpgaKind, obj: Mapping[str, Any]) -> None:
        slim = _slim(obj)
        if slim is not None:
            self._objects[kind][(slim[0], slim[1])] = slim[2]
            self._cache.pop(slim[0], None)
            self._on_change()

    def delete(self, kind: FpgaKind, obj: Mapping[str, Any]) -> None:
        slim = _slim(obj)
        if slim is not None:
            self._objects[kind].pop((slim[0], slim[1]), None)
            self._cache.pop(slim[0], None)
            self._on_change()

    def objects(self, kind: FpgaKind) -> list[dict[str, Any]]:
        """Every namespace's objects of ``kind`` (name, namespace and spec), in a stable order."""
        return [
            {"metadata": {"name": name, "namespace": ns}, "spec": obj["spec"]}
            for (ns, name), obj in sorted(self._objects[kind].items())
        ]

    def mappings(self, namespace: str) -> NamespaceMappings:
        cached = self._cache.get(namespace)
        if cached is None:
            of = [
                [o for (ns, _), o in sorted(self._objects[k].items()) if ns == namespace]
                for k in (FpgaKind.ACCELERATOR_FUNCTION, FpgaKind.FPGA_REGION)
            ]
            cached = namespace_mappings(of[0], of[1])
            for problem in cached.problems:
                log.warning("namespace %s: %s", namespace, problem)
            self._cache[namespace] = cached
        return cached
