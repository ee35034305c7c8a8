"""The FPGA DeviceClasses made from AcceleratorFunctions and FpgaRegions (pure generator)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.fpga.discovery import af_resource_name
from intel_device_plugins.webhooks.fpga import namespace_mappings
from intel_device_plugins.webhooks.fpgaclasses import BadObject, generate, object_class
from intel_device_plugins.webhooks.store import FpgaKind
from tests.webhooks.podfixtures import AF_NLB0, IFACE, IFACE_D5005, NLB0, NLB3, REGION, af, region

AF, RG = FpgaKind.ACCELERATOR_FUNCTION, FpgaKind.FPGA_REGION
# Kubernetes' DNS-1123 subdomain (what a DeviceClass name must be), and its label limit, which the scheme
# keeps too.
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_name(name: str) -> bool:
    return len(name) <= 253 and bool(SUBDOMAIN.match(name)) and all(len(p) <= 63 for p in name.split("."))


def test_af_mode_class_maps_the_plugins_exact_name_and_selects_the_function() -> None:
    spec = object_class(AF, af("arria10.dcp1.2-nlb0"))
    assert spec.extended_resource_name == AF_NLB0  # upstream's sample, as the webhook's tests know it
    assert spec.name == f"af-{IFACE}.{NLB0}.fpga.intel.com"
    selector = device_class(spec)["spec"]["selectors"][0]["cel"]["expression"]
    assert f'device.attributes["fpga.intel.com"].interfaceId == "{IFACE}"' in selector
    assert f'device.attributes["fpga.intel.com"].afuId == "{NLB0}"' in selector
    assert '"region" in device.attributes["fpga.intel.com"]' in selector, "af mode: ports only"


def test_the_class_serves_the_name_the_webhook_maps_to() -> None:
    """The webhook's mapping and the class agree for every AF and region: the pod the webhook
    rewrites asks for exactly the class's extended resource."""
    objs = [af("a"), af("b", afu=NLB3, mode="region"), af("c", iface=IFACE_D5005, afu=NLB3)]
    regions = [region("r", iface=IFACE_D5005)]
    mapped = {m.resource for m in namespace_mappings(objs, regions).by_name.values()}
    generated = generate([*((AF, o) for o in objs), *((RG, o) for o in regions)])
    assert {c.extended_resource_name for c in generated.classes} == mapped


def test_region_mode_af_and_fpga_region_share_one_class_per_interface() -> None:
    generated = generate(
        [(AF, af("x", mode="region")), (AF, af("y", afu=NLB3, mode="region")), (RG, region("r"))]
    )
    (spec,) = generated.classes
    assert spec.name == f"region-{IFACE}.fpga.intel.com"
    assert spec.extended_resource_name == REGION
    assert spec.selector is not None and '"ports" in device.attributes["fpga.intel.com"]' in spec.selector
    assert f'interfaceId == "{IFACE}"' in spec.selector and "afuId" not in spec.selector


def test_duplicates_across_namespaces_give_one_class_and_order_does_not_matter() -> None:
    objects = [(AF, af("nlb0", ns=ns)) for ns in ("a", "b", "c")] + [(AF, af("nlb3", afu=NLB3, ns="b"))]
    forward, backward = generate(objects), generate(reversed(objects))
    assert forward == backward
    assert [c.name for c in forward.classes] == sorted(
        [f"af-{IFACE}.{NLB0}.fpga.intel.com", f"af-{IFACE}.{NLB3}.fpga.intel.com"]
    )


def _with_spec(**spec: Any) -> dict[str, Any]:
    obj = af("bad", ns="team")
    obj["spec"] = {**obj["spec"], **spec}
    return obj


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (_with_spec(interfaceId="69528DB6EB31577A8C3668F9FAA081F6"), "spec.interfaceId '69528DB6"),
        (_with_spec(interfaceId="6952"), "spec.interfaceId '6952' is not 8 to 32"),
        (_with_spec(interfaceId=IFACE + "00"), "spec.interfaceId"),
        (_with_spec(afuId="../../etc/passwd"), "spec.afuId '../../etc/passwd' is not"),
        (_with_spec(afuId=None), "spec.afuId None"),
        (_with_spec(afuId=NLB0 + "0"), "spec.afuId '.*' has an odd number of digits"),
        (_with_spec(mode="afx"), "spec.mode 'afx' is neither 'af' nor 'region'"),
        ({"metadata": {"namespace": "team"}, "spec": {}}, "without metadata.name: metadata.name is missing"),
        ({"metadata": {"name": "bad", "namespace": "team"}, "spec": "x"}, "spec is missing"),
    ],
)
def test_bad_objects_are_refused_naming_the_object_and_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(BadObject, match=message) as refused:
        object_class(AF, obj)
    if "name" in obj["metadata"]:
        assert str(refused.value).startswith("AcceleratorFunction team/bad: "), refused.value


def test_a_bad_object_is_left_out_and_reported_and_the_others_still_count() -> None:
    generated = generate([(AF, af("good")), (RG, region("bad-region", iface="nothex!!", ns="x"))])
    assert [c.extended_resource_name for c in generated.classes] == [AF_NLB0]
    assert generated.problems == (
        "FpgaRegion x/bad-region: spec.interfaceId 'nothex!!' is not 8 to 32 lower-case hexadecimal digits",
    )


hex_bytes = st.integers(min_value=4, max_value=16).flatmap(
    lambda n: st.binary(min_size=n, max_size=n).map(lambda b: b.hex())
)
afu_bytes = st.integers(min_value=4, max_value=20).flatmap(
    lambda n: st.binary(min_size=n, max_size=n).map(lambda b: b.hex())
)


@given(interface_id=hex_bytes, afu_id=afu_bytes)
def test_every_valid_af_gets_a_valid_class_name_and_the_plugins_name(interface_id: str, afu_id: str) -> None:
    spec = object_class(AF, af("f", afu=afu_id, iface=interface_id))
    assert valid_name(spec.name), spec.name
    assert spec.extended_resource_name == "fpga.intel.com/" + af_resource_name(interface_id, afu_id)
    region_spec = object_class(RG, region("r", iface=interface_id))
    assert valid_name(region_spec.name), region_spec.name
    assert region_spec.name != spec.name


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), hex_bytes, afu_bytes, st.sampled_from(["af", "region"])),
        max_size=8,
    )
)
def test_one_class_per_distinct_id_set_whatever_the_namespaces(
    entries: list[tuple[str, str, str, str]],
) -> None:
    objects = [(AF, af(f"f{i}", afu=u, mode=m, iface=f, ns=ns)) for i, (ns, f, u, m) in enumerate(entries)]
    generated = generate(objects)
    wanted = {(f, u) if m == "af" else (f,) for _, f, u, m in entries}
    assert len(generated.classes) == len(wanted)
    assert generated.problems == ()
    names = [c.name for c in generated.classes]
    assert names == sorted(set(names))
