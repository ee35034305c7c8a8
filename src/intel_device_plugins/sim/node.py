"""Declarative simulated nodes: a small TOML file in, a fake sysfs/devfs tree out.

Example::

    [node]
    name = "sim-node"
    numa_nodes = 2

    [[gpu]]
    driver = "i915"
    count = 4
    numa_node = 0

Each top-level table other than ``[node]`` names a device kind; its builder in ``sim/<kind>.py``
turns the entries into files. Unknown kinds or keys are errors that name the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from intel_device_plugins.sim import dlb, fpga, gpu, idxd, npu, qat, sgx
from intel_device_plugins.sim.fakefs import FakeTree

KindBuilder = Callable[[FakeTree, Sequence[Mapping[str, Any]]], None]

BUILDERS: Mapping[str, KindBuilder] = MappingProxyType(
    {
        "gpu": gpu.build,
        "qat": qat.build,
        "qat_kernel": qat.build_kernel,
        "dlb": dlb.build,
        "dsa": idxd.build_dsa,
        "iaa": idxd.build_iaa,
        "npu": npu.build,
        "sgx": sgx.build,
        "fpga": fpga.build,
    }
)
"""Device kind → builder. A new kind is one module in ``sim/`` plus one line here."""


class NodeSpecError(ValueError):
    """A node description that cannot be built; the message names the file and the key."""


@dataclass(frozen=True)
class NodeSpec:
    name: str = "sim-node"
    numa_nodes: int = 1
    cpus_per_numa_node: int = 4
    devices: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)


def parse_node_spec(text: str, source: str = "<node spec>") -> NodeSpec:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise NodeSpecError(f"{source}: {error}") from error
    node = document.pop("node", {})
    if not isinstance(node, dict):
        raise NodeSpecError(f"{source}: [node] must be a table")
    unknown = set(node) - {"name", "numa_nodes", "cpus_per_numa_node"}
    if unknown:
        raise NodeSpecError(f"{source}: unknown key(s) in [node]: {', '.join(sorted(unknown))}")
    devices: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for kind, entries in document.items():
        if kind not in BUILDERS:
            raise NodeSpecError(
                f"{source}: unknown device kind [[{kind}]]; known: {', '.join(sorted(BUILDERS))}"
            )
        if not isinstance(entries, list):
            raise NodeSpecError(f"{source}: {kind} must be an array of tables ([[{kind}]])")
        devices[kind] = tuple(entries)
    try:
        return NodeSpec(
            name=str(node.get("name", "sim-node")),
            numa_nodes=int(node.get("numa_nodes", 1)),
            cpus_per_numa_node=int(node.get("cpus_per_numa_node", 4)),
            devices=devices,
        )
    except (TypeError, ValueError) as error:
        raise NodeSpecError(f"{source}: [node]: {error}") from error


def load_node_spec(path: Path) -> NodeSpec:
    return parse_node_spec(path.read_text(encoding="utf-8"), str(path))


def build_node(spec: NodeSpec, root: Path) -> FakeTree:
    """Write the simulated node below ``root`` (which should be empty) and return its tree."""
    tree = FakeTree(root, spec.numa_nodes, spec.cpus_per_numa_node)
    tree.mkdir("/sys/class")
    tree.mkdir("/dev")
    tree.write_numa_nodes()
    for kind, entries in spec.devices.items():
        try:
            BUILDERS[kind](tree, entries)
        except (KeyError, TypeError, ValueError) as error:
            raise NodeSpecError(f"[[{kind}]]: {error}") from error
    return tree
