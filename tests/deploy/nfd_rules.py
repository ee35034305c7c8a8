"""A small evaluator of Node Feature Discovery's NodeFeatureRules, for the rules in deploy/nfd.

It covers what those rules use: ``matchFeatures`` and ``matchAny``; instance features (``pci.device``) whose
expressions must all hold for one device; flag features (``kernel.loadedmodule``, ``kernel.enabledmodule``,
``cpu.cpuid``) and attribute features (``cpu.security``, ``kernel.config``); the operators ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``, ``IsTrue``, ``IsFalse``; static ``labels`` and ``labelsTemplate`` with
``{{ range .pci.device }}…{{ .<attribute> }}…{{ end }}`` and ``{{ len .pci.device }}`` over the devices the
rule matched. Anything else is an error, so a rule using more than this fails its test instead of passing
unevaluated. Devices are read from a node simulator's tree as NFD's pci source reads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.sim.fakefs import FakeTree

RULE_FILES = ("node-feature-rules.yaml", "platform-labeling-rules.yaml")
INSTANCE_FEATURES = frozenset({"pci.device"})
FLAG_FEATURES = frozenset({"kernel.loadedmodule", "kernel.enabledmodule", "cpu.cpuid"})
ATTRIBUTE_FEATURES = frozenset({"cpu.security", "kernel.config"})


@dataclass(frozen=True)
class NodeFeatures:
    """What NFD's worker would report for a node."""

    pci_devices: tuple[Mapping[str, str], ...] = ()
    flags: Mapping[str, frozenset[str]] = field(default_factory=dict)
    attributes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def pci_devices(tree: FakeTree) -> tuple[Mapping[str, str], ...]:
    """``vendor``, ``device`` and ``class`` of every PCI function, as NFD's pci source has them
    (hex without ``0x``; the class without its programming interface: ``0x030000`` → ``0300``)."""
    devices: list[Mapping[str, str]] = []
    root = tree.path("/sys/bus/pci/devices")
    for function in sorted(root.iterdir()) if root.is_dir() else ():

        def read(name: str, function: Path = function) -> str:
            return (function / name).read_text(encoding="utf-8").strip().removeprefix("0x")

        devices.append({"vendor": read("vendor"), "device": read("device"), "class": read("class")[:4]})
    return tuple(devices)


def load_rules(directory: Path) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for name in RULE_FILES:
        document = yaml.safe_load((directory / name).read_text(encoding="utf-8"))
        assert document["kind"] == "NodeFeatureRule", name
        rules.extend(document["spec"]["rules"])
    return rules


def _expression_holds(expression: Mapping[str, Any], value: str | None) -> bool:
    op = expression["op"]
    values = [str(v) for v in expression.get("value", [])]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is not None and value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op == "IsTrue":
        return value == "true"
    if op == "IsFalse":
        return value == "false"
    raise ValueError(f"operator {op!r} is not evaluated here")


def _term(term: Mapping[str, Any], node: NodeFeatures) -> tuple[bool, list[Mapping[str, str]]]:
    """Whether one ``matchFeatures`` entry holds, and the PCI devices it matched."""
    feature = term["feature"]
    expressions: Mapping[str, Mapping[str, Any]] = term["matchExpressions"]
    if feature in INSTANCE_FEATURES:
        matched = [
            d for d in node.pci_devices if all(_expression_holds(e, d.get(k)) for k, e in expressions.items())
        ]
        return bool(matched), matched
    if feature in FLAG_FEATURES:
        flags = node.flags.get(feature, frozenset())
        return all(_expression_holds(e, "" if k in flags else None) for k, e in expressions.items()), []
    if feature in ATTRIBUTE_FEATURES:
        attrs = node.attributes.get(feature, {})
        return all(_expression_holds(e, attrs.get(k)) for k, e in expressions.items()), []
    raise ValueError(f"feature {feature!r} is not evaluated here")


def _all_terms(
    terms: Sequence[Mapping[str, Any]], node: NodeFeatures
) -> tuple[bool, list[Mapping[str, str]]]:
    matched: list[Mapping[str, str]] = []
    for term in terms:
        holds, devices = _term(term, node)
        if not holds:
            return False, []
        matched.extend(devices)
    return True, matched


def rule_matches(rule: Mapping[str, Any], node: NodeFeatures) -> tuple[bool, list[Mapping[str, str]]]:
    unknown = set(rule) - {
        "name",
        "labels",
        "labelsTemplate",
        "extendedResources",
        "matchFeatures",
        "matchAny",
    }
    if unknown:
        raise ValueError(f"rule {rule['name']}: {sorted(unknown)} are not evaluated here")
    holds, devices = _all_terms(rule.get("matchFeatures", []), node)
    if not holds:
        return False, []
    if "matchAny" in rule:
        for alternative in rule["matchAny"]:
            any_holds, extra = _all_terms(alternative["matchFeatures"], node)
            if any_holds:
                return True, devices + extra
        return False, []
    return True, devices


RANGE = re.compile(r"\{\{\s*range \.pci\.device\s*\}\}(.*?)\{\{\s*end\s*\}\}", re.S)
FIELD = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
LEN = re.compile(r"\{\{\s*len \.pci\.device\s*\}\}")


def render(template: str, devices: Sequence[Mapping[str, str]]) -> dict[str, str]:
    def fill(body: str, device: Mapping[str, str]) -> str:
        return FIELD.sub(lambda f: device[f.group(1)], body)

    def one_range(match: re.Match[str]) -> str:
        return "".join(fill(match.group(1), d) for d in devices)

    text = LEN.sub(str(len(devices)), RANGE.sub(one_range, template))
    if "{{" in text:
        raise ValueError(f"template construct not evaluated here: {text!r}")
    labels: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            key, value = line.strip().split("=", 1)
            labels[key] = value
    return labels


def node_labels(rules: Sequence[Mapping[str, Any]], node: NodeFeatures) -> dict[str, str]:
    """The labels NFD's master would put on the node; later rules overwrite earlier ones' values."""
    labels: dict[str, str] = {}
    for rule in rules:
        holds, devices = rule_matches(rule, node)
        if not holds:
            continue
        labels.update({k: str(v) for k, v in rule.get("labels", {}).items()})
        if "labelsTemplate" in rule:
            labels.update(render(rule["labelsTemplate"], devices))
    return labels
