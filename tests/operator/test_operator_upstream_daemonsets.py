"""The DaemonSets for upstream's 8 samples against upstream's own, written down in test data.

Every field must be upstream's except where ``differences`` in the data file says otherwise and why; a
difference listed there must really exist on upstream's side, so the list cannot go stale either.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.operator.reconcile import plan
from intel_device_plugins.operator.upgrade import effective_spec

DATA = Path(__file__).parent / "data" / "upstream_sample_daemonsets.yaml"
NAMESPACE = "inteldeviceplugins-system"
FPGA_SERVICE_ACCOUNT = "intel-deviceplugins-fpga-plugin"  # as the shipped Deployment names it
MISSING = object()


def load() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DATA.read_text())
    return data


def _step(node: Any, element: Any, create: bool) -> Any:
    if isinstance(element, dict):
        for item in node:
            if item.get("name") == element["name"]:
                return item
        if create:
            item = {"name": element["name"]}
            node.append(item)
            return item
        return MISSING
    if isinstance(element, int):
        return node[element] if element < len(node) else MISSING
    if element not in node:
        if not create:
            return MISSING
        node[element] = {}
    return node[element]


def get(obj: Any, path: list[Any]) -> Any:
    node = obj
    for element in path:
        node = _step(node, element, create=False)
        if node is MISSING:
            return MISSING
    return node


def put(obj: Any, path: list[Any], value: Any) -> None:
    """Set (or, with MISSING, delete) the field at ``path``; a named list item is replaced in place."""
    parent = obj
    for element in path[:-1]:
        parent = _step(parent, element, create=True)
    last = path[-1]
    if isinstance(last, dict):
        index = next((i for i, item in enumerate(parent) if item.get("name") == last["name"]), None)
        if value is MISSING:
            if index is not None:
                del parent[index]
        elif index is None:
            parent.append(value)
        else:
            parent[index] = value
    elif value is MISSING:
        del parent[last]
    else:
        parent[last] = value


def _for_kind(value: Any, kind: str) -> Any:
    if isinstance(value, str):
        return value.replace("<k>", kind)
    if isinstance(value, list):
        return [_for_kind(v, kind) for v in value]
    if isinstance(value, dict):
        return {k: _for_kind(v, kind) for k, v in value.items()}
    return value


def differences_for(kind: str) -> list[dict[str, Any]]:
    return [d for d in load()["differences"] if d["kinds"] == "all" or kind in d["kinds"]]


def ours(kind: DeviceKind, uid: str) -> dict[str, Any]:
    sample = copy.deepcopy(load()["samples"][kind.value])
    sample["metadata"]["uid"] = uid
    daemonset = plan(kind, sample, {}, NAMESPACE, fpga_service_account=FPGA_SERVICE_ACCOUNT).daemonset
    assert daemonset is not None
    return daemonset


def policy_value(kind: DeviceKind, policy: str) -> str:
    """The image the operator's image policy makes of upstream's sample reference."""
    spec, _ = effective_spec(parse_spec(kind, load()["samples"][kind.value]["spec"]), {})
    return str(spec.image if policy == "image" else getattr(spec, "init_image", ""))


def test_the_data_covers_all_eight_samples() -> None:
    assert set(load()["upstream"]) == set(load()["samples"]) == {k.value for k in DeviceKind}


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_sample_daemonset_is_upstreams_but_for_the_listed_differences(kind: DeviceKind) -> None:
    upstream = load()["upstream"][kind.value]
    uid = upstream["metadata"]["ownerReferences"][0]["uid"]
    expected = copy.deepcopy(upstream)
    for diff in differences_for(kind.value):
        path = diff["path"]
        if "ours_policy" in diff:  # upstream deploys the sample's reference as it is
            sample_spec = load()["samples"][kind.value]["spec"]
            before = sample_spec["image" if diff["ours_policy"] == "image" else "initImage"]
        elif "upstream_by_kind" in diff:
            before = diff["upstream_by_kind"][kind.value]
        else:
            before = _for_kind(diff.get("upstream", MISSING), kind.value)
        assert get(upstream, path) == before, f"{kind.value}: upstream's {path} is not what the data says"
        if "ours_policy" in diff:
            put(expected, path, policy_value(kind, diff["ours_policy"]))
            continue
        after = _for_kind(diff.get("ours", MISSING), kind.value)
        assert after != before, f"{kind.value}: {path} is listed as a difference but is the same"
        put(expected, path, after)
    assert ours(kind, uid) == expected


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        (
            DeviceKind.DLB,
            ["spec", "template", "spec", "volumes", 3, "hostPath"],
            {"path": "/sys/devices", "type": "DirectoryOrCreate"},
        ),
        (
            DeviceKind.IAA,
            ["spec", "template", "spec", "nodeSelector"],
            {"intel.feature.node.kubernetes.io/iaa": "true", "kubernetes.io/arch": "amd64"},
        ),
    ],
)
def test_the_two_reported_differences_are_gone(kind: DeviceKind, path: list[Any], value: Any) -> None:
    """DLB's fourth volume and IAA's node selector were the two unlisted differences found before."""
    upstream = load()["upstream"][kind.value]
    assert get(upstream, path) == value
    assert get(ours(kind, "u"), path) == value
