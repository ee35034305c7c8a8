"""The operator by kind: one module per kind holds its profile, and the kind-neutral code never asks which
kind it holds."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.operator.registry import PROFILES, SPEC_CLASSES

OPERATOR = Path(__file__).resolve().parents[2] / "src" / "intel_device_plugins" / "operator"
KIND_NEUTRAL = (
    "daemonset.py",
    "validation.py",
    "combined.py",
    "crdgen.py",
    "model.py",
    "spec.py",
    "pod.py",
    "profile.py",
)
SPEC_CLASS_NAMES = frozenset(cls.__name__ for cls in SPEC_CLASSES.values())


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_each_kind_has_its_module_and_profile(kind: DeviceKind) -> None:
    module = importlib.import_module(f"intel_device_plugins.operator.kinds.{kind.value}")
    assert PROFILES[kind] is module.PROFILE
    assert PROFILES[kind].kind is kind
    assert PROFILES[kind].spec_class.__module__ == module.__name__


@pytest.mark.parametrize("filename", KIND_NEUTRAL)
def test_kind_neutral_code_names_no_kind(filename: str) -> None:
    """No ``isinstance(spec, GpuSpec)``, no ``kind is DeviceKind.FPGA``: such a test belongs in a profile."""
    tree = ast.parse((OPERATOR / filename).read_text())
    named = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "DeviceKind"
    } & {k.name for k in DeviceKind}
    named |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & SPEC_CLASS_NAMES
    named |= {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    } & SPEC_CLASS_NAMES
    assert not named, f"{filename} names {sorted(named)}"
