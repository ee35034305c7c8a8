"""The generated codecs against protobuf's own classes, for every message of every proto the generator
reads (the kubelet's APIs and xpumd's device-info API).

protobuf's classes (``k8stest.kubeletapi``, ``k8stest.xpumd``, tests only) are the reference: every
message, filled in every field, goes through protobuf's encoder into the codec's decoder, back out
through the codec's encoder and into protobuf's decoder, and must come out equal both ways.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as Reference

from intel_device_plugins.kubeletapi import wire
from intel_device_plugins.kubeletapi.wire import WireError

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("genproto", REPO / "tools" / "genproto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROTO_DIRS: tuple[tuple[Path, Path], ...] = _generator().PROTO_DIRS
WHERE = {p.stem: dirs for dirs in PROTO_DIRS for p in (SRC / dirs[0]).glob("*.proto")}
"""proto name → (directory of the proto and its codec, directory of its reference classes)."""
PROTOS = sorted(WHERE)
T = FieldDescriptor


def _modules(proto: str) -> tuple[ModuleType, ModuleType]:
    api, reference = WHERE[proto]
    return (
        importlib.import_module(f"{'.'.join(api.parts)}.{proto}"),
        importlib.import_module(f"{'.'.join(reference.parts)}.{proto}_pb2"),
    )


def _messages() -> list[tuple[str, str]]:
    found = []
    for proto in PROTOS:
        _, reference = _modules(proto)
        found += [(proto, name) for name in reference.DESCRIPTOR.message_types_by_name]
    return found


def _sample(field: FieldDescriptor, variant: int) -> Any:
    """A value for one field; ``variant`` picks extremes (negative, maximal, non-ASCII)."""
    ints = {
        T.TYPE_INT32: (7, -(2**31)),
        T.TYPE_INT64: (300, -(2**63)),
        T.TYPE_UINT32: (1, 2**32 - 1),
        T.TYPE_UINT64: (1, 2**64 - 1),
        T.TYPE_SINT32: (-3, 2**31 - 1),
        T.TYPE_SINT64: (-3, -(2**63)),
    }
    if field.type in ints:
        return ints[field.type][variant]
    if field.type == T.TYPE_BOOL:
        return True
    if field.type == T.TYPE_ENUM:
        assert field.enum_type is not None
        return field.enum_type.values[-1].number if variant else 1
    if field.type == T.TYPE_STRING:
        return ("név-ü", "x" * 300)[variant] + field.name
    if field.type == T.TYPE_BYTES:
        return b"\x00\xff" * (1 + variant * 100)
    raise AssertionError(f"{field.full_name}: no sample for type {field.type}")


def _filled(descriptor: Descriptor, reference: ModuleType, variant: int) -> Reference:
    message: Reference = getattr(reference, descriptor.name)()
    for field in descriptor.fields:
        target = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field, value_field = field.message_type.fields
            for index in range(2):
                key = _sample(key_field, variant) + str(index)
                if value_field.message_type is not None:
                    target[key].CopyFrom(_filled(value_field.message_type, reference, variant))
                else:
                    target[key] = _sample(value_field, variant)
            target[_sample(key_field, variant) + "-default"]  # an entry with its value left default
        elif field.is_repeated:
            for _ in range(2):
                if field.message_type is not None:
                    target.add().CopyFrom(_filled(field.message_type, reference, variant))
                else:
                    target.append(_sample(field, variant))
        elif field.message_type is not None:
            target.CopyFrom(_filled(field.message_type, reference, variant))
        else:
            setattr(message, field.name, _sample(field, variant))
    return message


def _plain_reference(message: Reference) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_type = field.message_type.fields_by_name["value"]
            plain[field.name] = {
                k: _plain_reference(v) if value_type.message_type is not None else v for k, v in value.items()
            }
        elif field.is_repeated:
            plain[field.name] = [_plain_reference(v) if field.message_type else v for v in value]
        elif field.message_type is not None:
            plain[field.name] = _plain_reference(value) if message.HasField(field.name) else None
        elif field.has_presence:
            plain[field.name] = value if message.HasField(field.name) else None
        else:
            plain[field.name] = value
    return plain


def _plain_codec(message: Any) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for field in dataclasses.fields(message):
        value = getattr(message, field.name)
        if isinstance(value, Mapping):
            plain[field.name] = {
                k: _plain_codec(v) if dataclasses.is_dataclass(v) else v for k, v in value.items()
            }
        elif isinstance(value, tuple):
            plain[field.name] = [_plain_codec(v) if dataclasses.is_dataclass(v) else v for v in value]
        elif dataclasses.is_dataclass(value):
            plain[field.name] = _plain_codec(value)
        else:
            plain[field.name] = value
    return plain


def test_every_proto_has_a_codec_and_every_message_a_class() -> None:
    assert PROTOS == [
        "deviceinfo",
        "deviceplugin_v1beta1",
        "dra_health_v1",
        "dra_health_v1alpha1",
        "dra_v1",
        "grpc_health_v1",
        "pluginregistration_v1",
        "podresources_v1",
    ]
    for proto in PROTOS:
        codec, reference = _modules(proto)
        for name in reference.DESCRIPTOR.message_types_by_name:
            cls: Any = getattr(codec, name)
            assert dataclasses.is_dataclass(cls)
            assert vars(cls)["__dataclass_params__"].frozen, f"{proto}.{name} is not frozen"
            assert "__slots__" in vars(cls), f"{proto}.{name} is not slotted"


@pytest.mark.parametrize("variant", [0, 1])
@pytest.mark.parametrize(("proto", "name"), _messages())
def test_every_message_round_trips_through_protobuf(proto: str, name: str, variant: int) -> None:
    codec, reference = _modules(proto)
    cls = getattr(codec, name)
    for original in (
        _filled(reference.DESCRIPTOR.message_types_by_name[name], reference, variant),
        getattr(reference, name)(),
    ):
        decoded = cls.decode(original.SerializeToString())
        assert _plain_codec(decoded) == _plain_reference(original)
        again = getattr(reference, name).FromString(decoded.encode())
        assert again == original
        assert _plain_reference(again) == _plain_reference(original)
        assert cls.decode(decoded.encode()) == decoded


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    codec, reference = _modules("dra_v1")
    claim = reference.Claim(namespace="ns", uid="u", name="n")
    unknown = b"\x20\x96\x01" + b"\x29" + bytes(8) + b"\x32\x02hi" + b"\x3d" + bytes(4) + b"\xf8\xff\x03\x01"
    assert codec.Claim.decode(unknown + claim.SerializeToString() + unknown) == codec.Claim("ns", "u", "n")


def test_packed_and_unpacked_repeated_numbers_both_decode() -> None:
    codec, reference = _modules("podresources_v1")
    packed = reference.ContainerResources(name="c", cpu_ids=[1, 2, 300]).SerializeToString()
    unpacked = b"\n\x01c" + b"\x18\x01\x18\x02\x18\xac\x02"
    assert codec.ContainerResources.decode(packed).cpu_ids == (1, 2, 300)
    assert codec.ContainerResources.decode(unpacked).cpu_ids == (1, 2, 300)
    assert codec.ContainerResources.decode(packed + unpacked).cpu_ids == (1, 2, 300, 1, 2, 300)


def test_negative_numbers_use_ten_bytes_as_protobuf_writes_them() -> None:
    codec, reference = _modules("deviceplugin_v1beta1")
    ours = codec.NUMANode(ID=-1).encode()
    assert ours == reference.NUMANode(ID=-1).SerializeToString()
    assert len(ours) == 11


def test_an_unknown_enum_number_is_kept() -> None:
    codec, reference = _modules("dra_health_v1")
    data = b"\x10\x07"  # DeviceHealth.health = 7
    assert codec.DeviceHealth.decode(data).health == 7
    assert (
        codec.DeviceHealth(health=codec.HealthStatus.UNHEALTHY).encode()
        == reference.DeviceHealth(health=reference.UNHEALTHY).SerializeToString()
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x0a\x05ab", "runs past the end"),  # length longer than what follows
        (b"\x0a", "truncated varint"),
        (b"\x12\x02\xff\xfe", "not UTF-8"),
        (b"\x08\x01", "wire type 0 where a string belongs"),  # namespace sent as a varint
        (b"\x0b", "wire type 3"),  # a group
        (b"\x00\x01", "field number 0"),
        (b"\x20" + b"\xff" * 11, "longer than ten bytes"),
    ],
)
def test_malformed_bytes_are_refused_naming_the_message(data: bytes, says: str) -> None:
    codec, _ = _modules("dra_v1")
    with pytest.raises(WireError, match=says) as caught:
        codec.Claim.decode(data)
    assert "k8s.io.kubelet.pkg.apis.dra.v1.Claim" in str(caught.value)


def test_a_nested_message_with_a_bad_field_names_that_field() -> None:
    codec, _ = _modules("dra_v1")
    with pytest.raises(WireError, match=r"dra\.v1\.Claim\.namespace: wire type 0"):
        codec.NodePrepareResourcesRequest.decode(b"\x0a\x02\x08\x01" + b"\x08\x01")


def test_services_name_their_methods_as_the_kubelet_calls_them() -> None:
    codec, _ = _modules("dra_v1")
    method = codec.DRAPlugin.NodePrepareResources
    assert method.path == "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
    assert method.request is codec.NodePrepareResourcesRequest
    dp, _ = _modules("deviceplugin_v1beta1")
    assert dp.DevicePlugin.ListAndWatch.server_streaming
    assert not dp.DevicePlugin.Allocate.server_streaming
    assert dp.Registration.Register.path == "/v1beta1.Registration/Register"


def test_the_runtime_does_not_load_protobuf() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {_modules(proto)[0].__name__}\n" for proto in PROTOS)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('google', 'grpc')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "tools" / "genproto.py"), str(tmp_path)], check=True, capture_output=True
    )
    for relative in (directory for dirs in PROTO_DIRS for directory in dirs):
        committed_dir, fresh_dir = SRC / relative, tmp_path / relative
        generated = sorted(p.name for p in fresh_dir.iterdir() if p.is_file())
        committed = sorted(
            p.name
            for p in committed_dir.iterdir()
            if p.is_file()
            and ("_pb2" in p.name or p.read_text().startswith("# Generated by tools/genproto.py"))
        )
        assert generated == committed, f"{relative}: committed files differ from the generated set"
        for name in generated:
            fresh = (fresh_dir / name).read_text()
            assert fresh == (committed_dir / name).read_text(), (
                f"{relative}/{name} is stale: run `make protos`"
            )
        if relative.parts[0] == "intel_device_plugins":
            assert generated == sorted(f"{p.stem}.py" for p in (SRC / relative).glob("*.proto"))
            for name in generated:
                assert (fresh_dir / name).read_text().startswith("# Generated by tools/genproto.py")


def test_varint_helpers_agree_with_the_wire_format() -> None:
    assert wire.varint(300) == b"\xac\x02"
    assert [value for _, _, value in wire.fields(b"\x08" + wire.varint(-5), "m")] == [2**64 - 5]
    assert wire.int32(2**64 - 5) == -5 and wire.int64(2**64 - 5) == -5
    assert wire.sint64(wire.zigzag(-(2**63))) == -(2**63)
    assert wire.sint32(wire.zigzag(-1)) == -1
