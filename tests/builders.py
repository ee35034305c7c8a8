"""Builders shared by test modules: example devices and simulated nodes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from intel_device_plugins.deviceplugin.model import DeviceInfo, DeviceNode
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec


def widget(index: int, **kwargs: object) -> DeviceInfo:
    """An example device with one node, ``/dev/widget<index>``; ``kwargs`` set the other fields."""
    path = f"/dev/widget{index}"
    return DeviceInfo(nodes=(DeviceNode(path, path),), **kwargs)  # type: ignore[arg-type]


def two_socket_node(root: Path, spec: str) -> FakeTree:
    """A simulated node with two NUMA nodes and the devices of ``spec`` (node description TOML)."""
    return build_node(parse_node_spec("[node]\nnuma_nodes = 2\n" + spec), root)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out
