"""The simulated RMD's behaviour as plain calls: ids, pools, CLOS, validation texts and status codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.sim.rmd import Acl, Machine, RmdError, RmdState, load_config, rmd_core_ids_ok


def _wl(cores: list[str], mx: int = 2, mn: int = 2, **extra: Any) -> dict[str, Any]:
    return {"core_ids": cores, "rdt": {"cache": {"max": mx, "min": mn}}, **extra}


def _error(fn: Any, *args: Any) -> RmdError:
    with pytest.raises(RmdError) as err:
        fn(*args)
    return err.value


def test_create_assigns_sequential_ids_never_reused() -> None:
    rmd = RmdState()
    first = rmd.create(_wl(["0-3"], uuid="a"))
    assert (first["id"], first["status"], first["origin"], first["uuid"]) == ("1", "Successful", "REST", "a")
    assert first["cos_name"].startswith("COS")
    rmd.delete("1")
    assert rmd.create(_wl(["0-3"]))["id"] == "2"
    assert [w["id"] for w in rmd.list_workloads()] == ["2"]


def test_guaranteed_ways_leave_the_pool_and_come_back() -> None:
    rmd = RmdState(Machine(guaranteed_ways="1-6"))
    assert rmd.cache_level("l3")["Caches"]["0"]["available_ways_pool"]["guaranteed"] == "1-6"
    rmd.create(_wl(["0"], 4, 4))
    assert rmd.cache_info(0)["available_ways_pool"]["guaranteed"] == "5-6"
    assert rmd.cache_info(1)["available_ways_pool"]["guaranteed"] == "1-6"  # CPU 0 is on cache 0 only
    err = _error(rmd.create, _wl(["1"], 3, 3))
    assert (err.status, err.text) == (500, "Not enough cache left on cache_id 0")
    rmd.delete("1")
    assert rmd.cache_info(0)["available_ways_pool"]["guaranteed"] == "1-6"


def test_clos_exhaustion() -> None:
    rmd = RmdState(Machine(clos=4, guaranteed_ways="1-8"))  # COS2 and COS3 are free for workloads
    rmd.create(_wl(["0"], 1, 1))
    rmd.create(_wl(["1"], 1, 1))
    err = _error(rmd.create, _wl(["2"], 1, 1))
    assert (err.status, err.text) == (500, "No free CLOS available")


def test_shared_pool_takes_no_ways_or_clos() -> None:
    rmd = RmdState(Machine(clos=3))
    for cpu in range(3):
        assert rmd.create(_wl([str(cpu)], 0, 0))["cos_name"] == "COS1"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"rdt": {"cache": {"max": 2, "min": 2}}}, "No task or core id specified"),
        ({"core_ids": ["0"]}, "No RDT/Plugins params in workload"),
        (_wl(["0"], 1, 2), "Min cache value cannot be greater than max cache value"),
        (_wl(["0"], 2, 0), "Bad cache ways request. Details: max_cache=2, min_cache=0, doesn't support"),
        ({"core_ids": ["0"], "rdt": {"cache": {"max": 2}}}, "Need to provide both cache.* or none of them"),
        (_wl(["x"]), "Invalid params (core ids) received"),
        (_wl(["999"]), "Invalid params (core ids) received"),
        (_wl(["0"], policy="platinum"), "Could not find the Policy. Can not find specified policy platinum"),
        ({"task_ids": ["77"], "policy": "gold"}, "The task: 77 does not exist"),
        (
            _wl(["0"], 2, 1, rdt={"cache": {"max": 2, "min": 1}, "mba": {"percentage": 50}}),
            "MBA only supported",
        ),
        ({"core_ids": ["0"], "rdt": {"mba": {"percentage": 50}}}, "Need to provide both cache and mba"),
        ({"core_ids": ["0"], "rdt": {"cache": {"max": 1, "min": 1}, "mba": {"mbps": 5}}}, "in Percentage"),
        (
            {"core_ids": ["0"], "rdt": {"cache": {"max": 1, "min": 1}, "mba": {"percentage": 101}}},
            "MBA values in should range from 1 to 100",
        ),
        (_wl(["0"], plugins={"turbo": {}}), "Trying to use module that is not loaded"),
    ],
)
def test_validation_errors_are_400_with_rmds_text(body: dict[str, Any], reason: str) -> None:
    err = _error(RmdState().create, body)
    assert err.status == 400
    assert err.text.startswith("Failed to validate workload. Reason: ")
    assert reason in err.text


def test_uuid_and_cpu_uniqueness() -> None:
    rmd = RmdState()
    rmd.create(_wl(["1", "4-5"], uuid="default/x"))
    err = _error(rmd.create, _wl(["8"], uuid="default/x"))
    assert err.text == (
        "Failed to validate workload. Reason: Workload validation in database failed. "
        "Details: UUID default/x already exists in workload 1\n"
    )
    err = _error(rmd.create, _wl(["0-1", "5"], uuid="team-a/x"))
    assert "CPU list [1 5] has been assigned" in err.text
    assert rmd.create(_wl(["8"], uuid="team-a/x"))["id"] == "2"


def test_patch_rules() -> None:
    rmd = RmdState()
    wl = rmd.create(_wl(["0-1"], 2, 2, uuid="u"))
    assert rmd.patch(wl["id"], _wl(["0-1"], 2, 2)) == (200, wl)  # nothing changed
    status, patched = rmd.patch(wl["id"], _wl(["0-1"], 3, 3))
    assert status == 200 and patched["rdt"]["cache"] == {"max": 3, "min": 3} and patched["uuid"] == "u"
    err = _error(rmd.patch, wl["id"], _wl(["4"], 3, 3))  # only the CPUs changed
    assert err.status == 500 and "Workload with id 1 already exists" in err.text
    err = _error(rmd.patch, "9", _wl(["0"]))
    assert (err.status, err.text) == (404, "404: Could not found workload")
    err = _error(rmd.patch, wl["id"], {"rdt": {"cache": {"max": 3, "min": 3}, "mba": {"percentage": 0}}})
    assert "MBA values range only from 1 to 100" in err.text


def test_cache_levels() -> None:
    rmd = RmdState()
    assert _error(rmd.cache_level, "l2").text.endswith(
        "Don't support cache level 2, Only expose last level cache 3"
    )
    assert _error(rmd.cache_one, "l3", "7").text == "Cache id 7 for level 3 is not found"
    info = rmd.cache_one("l3", "1")
    assert info["share_cpu_list"] == "16-31" and info["location_on_node"] == "1"


def test_core_ids_of_plugin_workloads_are_single_cpus_or_ranges() -> None:
    """RMD hands P-state the CPUs element by element: "1-2,9" is not an element it can read."""
    pstate = {"pstate": {"ratio": 1.5}}
    err = _error(RmdState().create, {"core_ids": ["1-2,9"], "plugins": pstate})
    assert (err.status, err.text) == (
        400,
        "Failed to validate workload. Reason: Invalid params (core ids) received",
    )
    assert RmdState().create({"core_ids": ["1-2", "9"], "plugins": pstate})["core_ids"] == ["1-2", "9"]
    assert RmdState().create(_wl(["1-2,9"]))["core_ids"] == ["1-2,9"]  # cache alone takes CPU lists
    assert [rmd_core_ids_ok([c]) for c in ("3", " 5 ", "1-2", "3-1", "0,2", "^2", "")] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]


def test_patch_changes_only_what_it_names() -> None:
    rmd = RmdState()
    body = {
        "core_ids": ["0-1"],
        "rdt": {"cache": {"max": 2, "min": 2}, "mba": {"percentage": 50}},
        "plugins": {"pstate": {"ratio": 1.5}},
        "uuid": "u",
    }
    wl = rmd.create(body)
    # MBA and P-state left out: RMD keeps both and answers with the workload unchanged.
    status, out = rmd.patch(wl["id"], _wl(["0-1"], 2, 2))
    assert status == 200 and out == wl
    # A cache change re-enforces: MBA (left out) stays, the plugins become the body's (none).
    _, out = rmd.patch(wl["id"], _wl(["0-1"], 3, 3))
    assert out["rdt"] == {"cache": {"max": 3, "min": 3}, "mba": {"percentage": 50}}
    assert "plugins" not in out


def test_policy_fills_the_cache_and_get_has_rmds_shape() -> None:
    rmd = RmdState()
    gold = rmd.create({"core_ids": ["0"], "policy": "gold", "uuid": "p"})
    assert gold["rdt"] == {"cache": {"max": 4, "min": 4}, "mba": {}}
    plain = rmd.create(_wl(["1"], uuid="q"))
    assert "policy" not in plain and "task_ids" not in plain
    assert plain["rdt"] == {"cache": {"max": 2, "min": 2}, "mba": {}}
    assert rmd.list_workloads() == [gold, plain]


@pytest.mark.parametrize(
    "rdt",
    [{"cache": {"max": -1, "min": -1}}, {"cache": {"max": 2, "min": 2}, "mba": {"percentage": -5}}],
)
def test_values_rmd_cannot_decode_are_500(rdt: dict[str, Any]) -> None:
    err = _error(RmdState().create, {"core_ids": ["0"], "rdt": rdt})
    assert (err.status, err.text) == (
        500,
        "Failed to read request correctly. Please check request syntax and data",
    )


def test_configuration_from_rmd_toml(tmp_path: Path) -> None:
    assert load_config(None, tmp_path).acl == Acl()  # nothing configured: RMD's defaults
    conf = tmp_path / "etc" / "rmd" / "conf"
    conf.mkdir(parents=True)
    (conf / "rmd.toml").write_text(
        '[default]\naddress = "0.0.0.0"\ntlsport = 9443\ncertpath = "/etc/rmd/cert/server"\n'
        '[acl]\nauthorization = "signature"\nadmincert = "/etc/rmd/acl/roles/admin/"\n'
    )
    cfg = load_config(Path("/etc/rmd/conf"), tmp_path)
    assert (cfg.address, cfg.tlsport, cfg.certpath) == ("0.0.0.0", 9443, tmp_path / "etc/rmd/cert/server")
    assert cfg.acl == Acl("signature", tmp_path / "etc/rmd/acl/roles/admin", None)
    (conf / "rmd.toml").write_text("[acl\n")
    with pytest.raises(ValueError, match=r"rmd\.toml"):
        load_config(Path("/etc/rmd/conf"), tmp_path)
