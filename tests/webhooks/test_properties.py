"""Properties of both mutations: the patch applies to the pod and yields a valid pod; mutating the result
again changes nothing (what ``reinvocationPolicy: IfNeeded`` relies on)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.webhooks import fpga, sgx
from intel_device_plugins.webhooks.jsonpatch import apply
from intel_device_plugins.webhooks.pod import Denied, check_pod, requested
from intel_device_plugins.webhooks.store import FpgaKind, MappingStore
from tests.webhooks.podfixtures import AF_NLB0, IFACE_D5005, NLB3, REGION, af, region

STORE = MappingStore()
STORE.replace(
    FpgaKind.ACCELERATOR_FUNCTION,
    [
        af("pre"),
        af("pre3", afu=NLB3),
        af("orch", mode="region"),
        af("orch-d", iface=IFACE_D5005, mode="region"),
    ],
)
STORE.replace(FpgaKind.FPGA_REGION, [region("r")])
MAPPINGS = STORE.mappings("default")

FPGA_NAMES = [f"fpga.intel.com/{n}" for n in ("pre", "pre3", "orch", "orch-d", "r", "unknown")] + [
    AF_NLB0,
    REGION,
]
SGX_NAMES = ["sgx.intel.com/epc", "sgx.intel.com/enclave", "sgx.intel.com/provision"]
amount = st.sampled_from(["0", "1", "2", "3", "1k", "512Ki", "1Mi", "500m"])
env_entry = st.one_of(
    st.builds(
        lambda n, v: {"name": n, "value": v},
        st.sampled_from(["A", "FPGA_REGION_1", "FPGA_AFU_9", "SGX_AESM_ADDR", "Z"]),
        st.text(max_size=5),
    ),
    st.builds(
        lambda n: {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        st.sampled_from(["B", "FPGA_AFU_1"]),
    ),
)


@st.composite
def containers(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    chosen = draw(st.dictionaries(st.sampled_from([*names, "cpu"]), amount, max_size=4))
    unequal = draw(st.booleans()) and draw(st.integers(0, 9)) == 0  # now and then limits != requests
    requests = {k: ("7" if unequal else v) for k, v in chosen.items()}
    c: dict[str, Any] = {
        "name": draw(st.sampled_from(["app", "aesmd", "qe", "side"])),
        "resources": {"limits": dict(chosen), "requests": requests},
    }
    if draw(st.booleans()):
        c["env"] = draw(st.lists(env_entry, max_size=4))
    if draw(st.booleans()):
        c["volumeMounts"] = [{"name": "m", "mountPath": draw(st.sampled_from(["/data", "/var/run/aesmd"]))}]
    return c


@st.composite
def pods(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    annotations = draw(
        st.dictionaries(
            st.sampled_from(["sgx.intel.com/quote-provider", "sgx.intel.com/epc", "other"]),
            st.sampled_from(["aesmd", "qe", "app", "1Ki"]),
            max_size=2,
        )
    )
    p: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "namespace": "default",
            **({"annotations": annotations} if annotations else {}),
        },
        "spec": {"containers": draw(st.lists(containers(names), min_size=1, max_size=4))},
    }
    if draw(st.booleans()):
        p["spec"]["volumes"] = [{"name": draw(st.sampled_from(["aesmd-socket", "data"])), "emptyDir": {}}]
    return p


def _valid_after(p: dict[str, Any], prefix: str) -> None:
    check_pod(p)
    for c in p["spec"]["containers"]:
        res = c.get("resources", {})
        mine = {k: v for k, v in res.get("limits", {}).items() if k.startswith(prefix)}
        assert mine == {k: v for k, v in res.get("requests", {}).items() if k.startswith(prefix)}
        requested(c, prefix)  # whole units, equal limits and requests: raises otherwise


@settings(max_examples=150, deadline=None)
@given(pods(FPGA_NAMES))
def test_fpga_patch_gives_a_valid_pod_and_a_second_run_changes_nothing(p: dict[str, Any]) -> None:
    try:
        ops = fpga.mutate_pod(p, MAPPINGS)
    except Denied:
        return
    once = apply(p, ops)
    _valid_after(once, fpga.PREFIX)
    env_paths = {op["path"] for op in ops if op["path"].endswith("/env")}
    for i, c in enumerate(once["spec"]["containers"]):
        names = [k for k in c["resources"]["limits"] if k.startswith(fpga.PREFIX)]
        assert all(n in MAPPINGS.identities for n in names), names
        if f"/spec/containers/{i}/env" in env_paths:
            env_names = [e["name"] for e in c["env"]]
            assert env_names == sorted(env_names)
    assert apply(once, fpga.mutate_pod(once, MAPPINGS)) == once


@settings(max_examples=150, deadline=None)
@given(pods(SGX_NAMES))
def test_sgx_patch_gives_a_valid_pod_and_a_second_run_changes_nothing(p: dict[str, Any]) -> None:
    try:
        ops = sgx.mutate_pod(p)
    except Denied:
        return
    once = apply(p, ops)
    assert once == sgx.mutated_pod(p)
    _valid_after(once, sgx.PREFIX)
    assert sgx.mutate_pod(once) == []
