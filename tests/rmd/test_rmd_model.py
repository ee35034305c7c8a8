"""The typed RMD model: parsing, the cross-field rules, CPU lists, and the generated CRDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.rmd import cpuset, crds
from intel_device_plugins.rmd.model import (
    CacheSpec,
    RmdConfigSpec,
    RmdNodeStateSpec,
    RmdWorkloadSpec,
    SpecError,
    parse,
    to_json,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "rmd" / "crds"
SAMPLES = ROOT / "deploy" / "rmd" / "samples"


def test_committed_crds_are_current() -> None:
    expected = crds.expected_files()
    on_disk = {p.name: p.read_text() for p in CRD_DIR.iterdir() if p.suffix == ".yaml"}
    stale = sorted(n for n in expected if on_disk.get(n) != expected[n])
    extra = sorted(set(on_disk) - set(expected))
    assert not stale and not extra, (
        f"stale {stale}, unexpected {extra}: run python -m intel_device_plugins.rmd.crds deploy/rmd/crds"
    )


def _version(kind: str) -> dict[str, Any]:
    crd = next(crds.crd(k) for k in crds.KINDS if k.kind == kind)
    assert crd["spec"]["scope"] == "Namespaced"
    version: dict[str, Any] = crd["spec"]["versions"][0]
    return version


def test_workload_crd_carries_rules_bounds_and_columns() -> None:
    version = _version("RmdWorkload")
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rdt = spec["properties"]["rdt"]["properties"]
    assert rdt["mba"]["properties"]["percentage"]["minimum"] == 1
    assert rdt["mba"]["properties"]["percentage"]["maximum"] == 100
    assert rdt["cache"]["required"] == ["max", "min"]
    assert "self.max >= self.min" in [r["rule"] for r in rdt["cache"]["x-kubernetes-validations"]]
    assert spec["properties"]["coreIds"]["items"]["pattern"] == cpuset.CPUSET_PATTERN
    messages = [r["message"] for r in spec["x-kubernetes-validations"]]
    assert any("v0.1 layout" in m and "rdt.cache" in m for m in messages)
    assert "set exactly one of nodes and nodeSelector" in messages
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Nodes", "Enforced", "Cache Max"}
    assert version["subresources"] == {"status": {}}


def test_config_crd_enforces_the_singleton_name() -> None:
    schema = _version("RmdConfig")["schema"]["openAPIV3Schema"]
    assert schema["x-kubernetes-validations"][0]["rule"] == "self.metadata.name == 'rmdconfig'"


def test_every_rule_has_cel_and_python_halves() -> None:
    for cls in (CacheSpec, RmdWorkloadSpec):
        for rule in cls.RULES:
            assert rule.cel and rule.message and callable(rule.holds)


def _workload(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"coreIds": ["0-3"], "rdt": {"cache": {"max": 2, "min": 2}}, "nodes": ["n1"]}
    base.update(spec)
    return {k: v for k, v in base.items() if v is not None}


def test_valid_workload_parses_to_typed_values() -> None:
    spec = parse(RmdWorkloadSpec, _workload(plugins={"pstate": {"ratio": "1.5", "monitoring": "on"}}))
    assert spec.core_ids == ("0-3",)
    assert spec.rdt is not None and spec.rdt.cache == CacheSpec(max=2, min=2)
    assert spec.plugins is not None and spec.plugins.pstate is not None
    assert spec.plugins.pstate.ratio == "1.5"
    assert spec.cpus() == frozenset({0, 1, 2, 3})
    assert to_json(spec) == _workload(plugins={"pstate": {"ratio": "1.5", "monitoring": "on"}})


@pytest.mark.parametrize(
    ("spec", "path", "fragment"),
    [
        (_workload(rdt={"cache": {"max": 1, "min": 2}}), "spec.rdt.cache", "max must be greater"),
        (_workload(rdt={"cache": {"max": 2, "min": 0}}), "spec.rdt.cache", "min = 0"),
        (_workload(rdt={"cache": {"max": -1, "min": -1}}), "spec.rdt.cache.max", "equal to 0"),
        (_workload(rdt={"cache": {"max": 2}}), "spec.rdt.cache.min", "Required"),
        (_workload(rdt={"mba": {"percentage": 0}}), "spec.rdt.mba.percentage", "greater than or equal to 1"),
        (_workload(rdt={"mba": {"percentage": 101}}), "spec.rdt.mba.percentage", "less than or equal to 100"),
        (_workload(coreIds=["3-1"]), "spec.coreIds[0]", "must not end before it starts"),
        (_workload(coreIds=["a"]), "spec.coreIds[0]", "does not match"),
        (_workload(nodeSelector={"a": "b"}), "spec", "exactly one of nodes and nodeSelector"),
        (_workload(nodes=None), "spec", "exactly one of nodes and nodeSelector"),
        (_workload(allCores=True), "spec", "exactly one of coreIds and allCores"),
        (_workload(reservedCoreIds=["0"]), "spec", "only meaningful with allCores"),
        (_workload(rdt=None), "spec", "nothing to enforce"),
        (_workload(rdt={"mba": {"percentage": 50}}), "spec", "rdt.mba needs rdt.cache"),
        (_workload(cache={"max": 2, "min": 2}), "spec", "spec.cache is the stale v0.1 layout"),
        (_workload(pstate={"ratio": "3.0"}), "spec", "spec.pstate is the stale v0.1 layout"),
        (_workload(plugins={"pstate": {"ratio": "fast"}}), "spec.plugins.pstate.ratio", "does not match"),
        (_workload(plugins={"pstate": {"monitoring": "yes"}}), "spec.plugins.pstate.monitoring", "unsupp"),
        (_workload(allCores="yes", coreIds=None), "spec.allCores", "must be a boolean"),
    ],
)
def test_invalid_workloads_name_the_field(spec: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(RmdWorkloadSpec, spec)
    assert any(e.path == path and fragment in e.message for e in err.value.errors), err.value.errors


def test_node_state_and_config_specs() -> None:
    assert parse(RmdNodeStateSpec, {"node": "n1"}).node == "n1"
    with pytest.raises(SpecError, match=r"spec.node: Required"):
        parse(RmdNodeStateSpec, {})
    cfg = parse(RmdConfigSpec, {"deployNodeAgent": True, "rmdNodeSelector": {"a": "b"}})
    assert cfg.deploy_node_agent and dict(cfg.rmd_node_selector) == {"a": "b"}


def _docs(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("rmdworkload-*.yaml")), ids=lambda p: p.stem)
def test_samples_parse(path: Path) -> None:
    parse(RmdWorkloadSpec, _docs(path)["spec"])


@pytest.mark.parametrize("path", sorted((SAMPLES / "stale").glob("*.yaml")), ids=lambda p: p.stem)
def test_stale_samples_are_rejected_with_the_new_place(path: Path) -> None:
    with pytest.raises(SpecError, match=r"stale v0.1 layout: move max and min to spec.rdt.cache"):
        parse(RmdWorkloadSpec, _docs(path)["spec"])


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,6,8", {0, 1, 2, 3, 6, 8}), ("0-7,^3", {0, 1, 2, 4, 5, 6, 7}), ("", set()), (" 5 ", {5})],
)
def test_cpuset_parse(text: str, cpus: set[int]) -> None:
    assert cpuset.parse(text) == cpus


@pytest.mark.parametrize("text", ["1-", "x", "0,,1", "70000"])
def test_cpuset_rejects(text: str) -> None:
    with pytest.raises(cpuset.CpusetError, match=text.strip()):
        cpuset.parse(text)


@given(st.frozensets(st.integers(min_value=0, max_value=300)))
def test_cpuset_format_round_trips(cpus: frozenset[int]) -> None:
    text = cpuset.format_cpus(cpus)
    assert cpuset.parse(text) == cpus
    assert cpuset.format_cpus(cpuset.parse(text)) == text


# Values the CRD's pattern or its ascending-range rule refuses; tests/rmd/test_rmd_cluster.py sends the
# same values to the API server.
CORE_IDS_REFUSED = ("0, 2", " 5 ", "", "3-1", "0-3,^7-5")


@pytest.mark.parametrize("value", CORE_IDS_REFUSED)
def test_the_operator_refuses_what_the_crd_refuses(value: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(RmdWorkloadSpec, _workload(coreIds=[value]))
    assert [e.path for e in err.value.errors] == ["spec.coreIds[0]"]
