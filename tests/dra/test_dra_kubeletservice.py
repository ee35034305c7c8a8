"""The driver's gRPC services with the test as the kubelet, over real unix sockets."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import yaml

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.checkpoint import Checkpoint
from intel_device_plugins.dra.kubeletservice import (
    HEALTH_CHECK_TIMEOUT,
    HEALTH_RESEND_INTERVAL,
    MAX_CONCURRENT_READS,
    KubeletService,
)
from intel_device_plugins.dra.model import ClaimRef, Inventory
from intel_device_plugins.dra.parameters import ParameterKind, api_version, parameter
from intel_device_plugins.dra.registration import DriverSockets, SocketPaths
from intel_device_plugins.kube.rest import MAX_CONNECTIONS, RESOURCE_CLAIMS, RestClient
from k8stest.fakeclaims import fake_claims_api
from k8stest.kubeletapi import dra_health_v1_pb2 as health_v1
from k8stest.kubeletapi import dra_health_v1_pb2_grpc as health_v1_grpc
from k8stest.kubeletapi import dra_health_v1alpha1_pb2 as health_v1alpha1
from k8stest.kubeletapi import dra_health_v1alpha1_pb2_grpc as health_v1alpha1_grpc
from k8stest.kubeletapi import dra_v1_pb2 as pb
from k8stest.kubeletapi import dra_v1_pb2_grpc as pb_grpc
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb
from k8stest.kubeletapi import pluginregistration_v1_pb2_grpc as reg_grpc
from tests.dra.draclaims import DRIVER, NODE, Profile, claim, device, inventory, result

UID_A = "0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1e"
UID_B = "7c1d0e9f-1111-4a51-9c8e-2f4b6d8a0c1e"
KIND = f"k8s.{DRIVER}/claim"


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: socket paths must fit 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class ApiServer:
    """The claims the driver may read, and how often it asked."""

    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    reads: int = 0
    down: bool = False
    in_flight: int = 0
    peak_in_flight: int = 0

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)  # an answer takes a turn of the loop at least
            if self.down:
                raise ConnectionRefusedError("API server unreachable")
            try:
                return self.claims[(namespace, name)]
            except KeyError:
                raise LookupError(f"resourceclaims {name!r} not found") from None
        finally:
            self.in_flight -= 1

    def add(self, document: dict[str, Any]) -> pb.Claim:
        meta = document["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = document
        return pb.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


@dataclass
class Driver:
    service: KubeletService
    sockets: DriverSockets
    profile: Profile
    cdi_dir: Path


@asynccontextmanager
async def driver(
    root: Path, api: ApiServer, profile: Profile, instance: str = "", **kw: Any
) -> AsyncIterator[Driver]:
    cdi_dir = root / "cdi"
    service = KubeletService(
        profile,
        profile.scan,
        api.get,
        NODE,
        Checkpoint.for_driver(root / "plugins", DRIVER),
        cdi_dir,
        **kw,
    )
    paths = SocketPaths.for_instance(root / "registry", root / "plugins", DRIVER, instance)
    sockets = DriverSockets(paths, DRIVER, service.handlers())
    await sockets.start()
    try:
        yield Driver(service, sockets, profile, cdi_dir)
    finally:
        await sockets.stop(grace=0)


@asynccontextmanager
async def kubelet(registrar: Path) -> AsyncIterator[tuple[grpc.aio.Channel, reg_pb.PluginInfo]]:
    """Do what the kubelet's plugin watcher does: GetInfo on the registration socket, then connect."""
    async with grpc.aio.insecure_channel(f"unix://{registrar}") as channel:
        info = await reg_grpc.RegistrationStub(channel).GetInfo(reg_pb.InfoRequest(), timeout=5)
        async with grpc.aio.insecure_channel(f"unix://{info.endpoint}") as dra:
            await reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=5
            )
            yield dra, info


def _answer(response: pb.NodePrepareResourcesResponse) -> dict[str, Any]:
    return {
        uid: {
            "error": entry.error,
            "devices": [
                (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids), d.share_id)
                for d in entry.devices
            ],
        }
        for uid, entry in response.claims.items()
    }


async def test_registration_names_driver_endpoint_and_services(root: Path) -> None:
    async with driver(root, ApiServer(), Profile()) as d, kubelet(d.sockets.paths.registrar) as (_, info):
        assert info.type == "DRAPlugin" and info.name == DRIVER
        assert info.endpoint == str(root / "plugins" / DRIVER / "dra.sock")
        assert list(info.supported_versions) == [
            "v1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ]
        assert [s.registered for s in d.sockets.registration.statuses] == [True]


async def test_prepare_twice_gives_the_same_answer_and_reads_the_claim_once(root: Path) -> None:
    api = ApiServer()
    ref = api.add(claim(UID_A, result("card1", shareID="s-9"), result("card0", request="b/x")))
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        stub = pb_grpc.DRAPluginStub(channel)
        first = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        second = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
    assert (
        _answer(first)
        == _answer(second)
        == {
            UID_A: {
                "error": "",
                "devices": [
                    (["gpu"], NODE, "card1", [f"{KIND}={UID_A}-card1"], "s-9"),
                    (["b"], NODE, "card0", [f"{KIND}={UID_A}-card0"], ""),
                ],
            }
        }
    )
    assert first.claims[UID_A].devices[1].HasField("share_id") is False
    assert api.reads == 1
    spec = yaml.safe_load((d.cdi_dir / f"k8s.{DRIVER}-claim_{UID_A}.json").read_text())
    assert spec["kind"] == KIND and [x["name"] for x in spec["devices"]] == [
        f"{UID_A}-card1",
        f"{UID_A}-card0",
    ]


async def test_unprepare_removes_exactly_the_claims_spec_file(root: Path) -> None:
    api = ApiServer()
    a = api.add(claim(UID_A, result("card0"), name="a"))
    b = api.add(claim(UID_B, result("card1"), name="b"))
    (root / "cdi").mkdir()
    unrelated = root / "cdi" / "intel.cdi.k8s.io-gpu-card0.yaml"
    unrelated.write_text("kept")
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        stub = pb_grpc.DRAPluginStub(channel)
        await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[a, b]), timeout=5)
        before = sorted(p.name for p in d.cdi_dir.iterdir())
        for _ in range(2):  # the second time the claim is already unprepared: still no error
            response = await stub.NodeUnprepareResources(
                pb.NodeUnprepareResourcesRequest(claims=[a]), timeout=5
            )
            assert dict(response.claims) == {UID_A: pb.NodeUnprepareResourceResponse(error="")}
        after = sorted(p.name for p in d.cdi_dir.iterdir())
        assert set(before) - set(after) == {f"k8s.{DRIVER}-claim_{UID_A}.json"}
        assert set(after) == {unrelated.name, f"k8s.{DRIVER}-claim_{UID_B}.json"}
        assert set(d.service.checkpoint.load()) == {UID_B}


async def test_restarted_driver_answers_and_unprepares_from_the_checkpoint(root: Path) -> None:
    api = ApiServer()
    ref = api.add(claim(UID_A, result("card0")))
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        first = await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5
        )
    api.down = True  # the new process cannot reach the API server; it must not need to
    restarted = Profile(current=Inventory())  # and the device is gone meanwhile
    async with driver(root, api, restarted) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        stub = pb_grpc.DRAPluginStub(channel)
        again = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        assert _answer(again) == _answer(first)
        undone = await stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[ref]), timeout=5)
        assert undone.claims[UID_A].error == ""
        assert list(d.cdi_dir.iterdir()) == []
        assert d.service.checkpoint.load() == {}


async def test_claims_in_one_call_fail_independently_naming_the_device(root: Path) -> None:
    api = ApiServer()
    good = api.add(claim(UID_A, result("card0"), name="good"))
    gone = api.add(claim(UID_B, result("card7"), name="gone"))
    missing = pb.Claim(namespace="ns", name="nowhere", uid="9e1d0e9f-2222-4a51-9c8e-2f4b6d8a0c1e")
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        response = await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[good, gone, missing]), timeout=5
        )
        assert response.claims[UID_A].error == "" and len(response.claims[UID_A].devices) == 1
        assert "ResourceClaim ns/gone: device card7 of driver gpu.example.com is not on this node" in (
            response.claims[UID_B].error
        )
        assert not response.claims[UID_B].devices
        assert "cannot read ResourceClaim ns/nowhere" in response.claims[missing.uid].error
        assert "not found" in response.claims[missing.uid].error
        assert set(d.service.checkpoint.load()) == {UID_A}
        assert [p.name for p in d.cdi_dir.iterdir()] == [f"k8s.{DRIVER}-claim_{UID_A}.json"]


@dataclass(frozen=True)
class ModeConfig:
    mode: str | None = parameter("mode", choices=("fast", "safe"))


@dataclass
class ConfiguredProfile(Profile):
    """A profile declaring one parameter kind."""

    parameter_kinds: tuple[ParameterKind, ...] = (
        ParameterKind(api_version(DRIVER), "ModeConfig", ModeConfig),
    )


async def test_claims_with_parameters_the_driver_refuses_fail_naming_the_field_and_leave_nothing(
    root: Path,
) -> None:
    api = ApiServer()
    kind = {"apiVersion": api_version(DRIVER), "kind": "ModeConfig"}
    cases = {
        "good": ({**kind, "mode": "safe"}, ""),
        "kind": (
            {**kind, "kind": "Other"},
            "config[0].opaque.parameters: apiVersion 'gpu.example.com/v1alpha1' kind 'Other' is not known",
        ),
        "field": (
            {**kind, "speed": "fast"},
            "config[0].opaque.parameters.speed: unknown field of ModeConfig",
        ),
        "range": (
            {**kind, "mode": "slow"},
            "config[0].opaque.parameters.mode: 'slow' is not one of fast, safe",
        ),
    }
    claims = {}
    for index, (name, (parameters, _)) in enumerate(cases.items()):
        document = claim(f"0b6a1c2e-7d3f-4a51-9c8e-2f4b6d8a0c1{index}", result("card0"), name=name)
        document["status"]["allocation"]["devices"]["config"] = [
            {
                "source": "FromClaim",
                "requests": ["gpu"],
                "opaque": {"driver": DRIVER, "parameters": parameters},
            }
        ]
        claims[name] = api.add(document)
    async with (
        driver(root, api, ConfiguredProfile()) as d,
        kubelet(d.sockets.paths.registrar) as (channel, _),
    ):
        response = await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=list(claims.values())), timeout=5
        )
        for name, (_, message) in cases.items():
            error = response.claims[claims[name].uid].error
            if not message:
                assert error == "" and len(response.claims[claims[name].uid].devices) == 1
                continue
            assert f"ResourceClaim ns/{name}: request gpu: status.allocation.devices.{message}" in error, (
                error
            )
            assert not response.claims[claims[name].uid].devices
        assert set(d.service.checkpoint.load()) == {claims["good"].uid}
    # The same claims for a driver declaring no kinds: every one refused.
    async with (
        driver(root / "plain", api, Profile()) as d,
        kubelet(d.sockets.paths.registrar) as (channel, _),
    ):
        response = await pb_grpc.DRAPluginStub(channel).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[claims["good"]]), timeout=5
        )
        assert (
            "driver gpu.example.com accepts no opaque parameters" in response.claims[claims["good"].uid].error
        )


async def test_a_deleted_spec_file_is_written_again_on_the_next_prepare(root: Path) -> None:
    api = ApiServer()
    ref = api.add(claim(UID_A, result("card0")))
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        stub = pb_grpc.DRAPluginStub(channel)
        await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        spec = d.cdi_dir / f"k8s.{DRIVER}-claim_{UID_A}.json"
        content = spec.read_bytes()
        spec.unlink()
        await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        assert spec.read_bytes() == content and api.reads == 2


MANY_CLAIMS = 1024
"""The most claims one call may name (``MAX_CLAIMS_PER_CALL``): a pod with that many small claims."""


def _many(count: int) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("ns", f"c{index}"): claim(
            f"{index:08x}-0000-4000-8000-000000000000", result(f"card{index % 2}"), name=f"c{index}"
        )
        for index in range(count)
    }


async def test_a_call_with_a_thousand_claims_reads_them_over_a_few_connections(root: Path) -> None:
    """Every claim is read and prepared, and the API client never holds more than a few connections
    open at once: each one costs a TLS session and its buffers, a connection per claim ran the driver
    out of memory."""
    documents = _many(MANY_CLAIMS)
    async with fake_claims_api(lambda ns, name: documents.get((ns, name))) as api:
        assert api.config is not None
        client = RestClient(api.config)

        async def get_claim(namespace: str, name: str) -> dict[str, Any]:
            return await client.get(RESOURCE_CLAIMS, name, namespace=namespace)

        profile = Profile()
        service = KubeletService(
            profile,
            profile.scan,
            get_claim,
            NODE,
            Checkpoint.for_driver(root / "plugins", DRIVER, sync_appends=False),
            root / "cdi",
        )
        refs = [ClaimRef(ns, name, doc["metadata"]["uid"]) for (ns, name), doc in documents.items()]
        try:
            outcomes = await asyncio.wait_for(service.prepare(refs), 120)
        finally:
            await client.close()
    failed = {uid: str(outcome) for uid, outcome in outcomes.items() if isinstance(outcome, BaseException)}
    assert failed == {}
    assert len(outcomes) == MANY_CLAIMS and api.counters.requests == MANY_CLAIMS
    assert len(service.checkpoint.load()) == MANY_CLAIMS
    assert 1 <= api.counters.peak_open <= MAX_CONNECTIONS, api.counters


async def test_a_call_with_a_thousand_claims_reads_a_few_at_a_time(root: Path) -> None:
    """The reads of one call are bounded, so a burst holds a few claims in memory, not all of them."""
    api = ApiServer(claims=_many(MANY_CLAIMS))
    profile = Profile()
    service = KubeletService(
        profile,
        profile.scan,
        api.get,
        NODE,
        Checkpoint.for_driver(root / "plugins", DRIVER, sync_appends=False),
        root / "cdi",
    )
    refs = [ClaimRef(ns, name, doc["metadata"]["uid"]) for (ns, name), doc in api.claims.items()]
    outcomes = await service.prepare(refs)
    assert not [outcome for outcome in outcomes.values() if isinstance(outcome, BaseException)]
    assert api.reads == MANY_CLAIMS
    assert 1 <= api.peak_in_flight <= MAX_CONCURRENT_READS


async def test_a_call_given_up_on_keeps_what_it_prepared_for_the_retry(root: Path) -> None:
    api = ApiServer(claims=_many(40))
    stalled = asyncio.Event()
    served = 0

    async def get(namespace: str, name: str) -> dict[str, Any]:
        nonlocal served
        if served == 10:  # the API server stalls after ten answers
            stalled.set()
            await asyncio.Event().wait()
        served += 1
        return await api.get(namespace, name)

    profile = Profile()
    service = KubeletService(
        profile, profile.scan, get, NODE, Checkpoint.for_driver(root / "plugins", DRIVER), root / "cdi"
    )
    refs = [ClaimRef(ns, name, doc["metadata"]["uid"]) for (ns, name), doc in api.claims.items()]
    call = asyncio.create_task(service.prepare(refs))
    await asyncio.wait_for(stalled.wait(), 10)
    call.cancel()  # the kubelet's deadline
    await asyncio.gather(call, return_exceptions=True)
    assert len(service.checkpoint.load()) == 10
    served = -1000  # the API server answers again
    outcomes = await service.prepare(refs)
    assert not [o for o in outcomes.values() if isinstance(o, BaseException)]
    assert api.reads == 40  # the ten prepared before were answered from the checkpoint


async def test_a_claim_with_nothing_of_this_driver_leaves_no_record(root: Path) -> None:
    """Nothing to undo, so nothing to remember: only an unprepare would otherwise remove the record, and
    the kubelet sends none to a driver whose prepare gave no devices."""
    api = ApiServer()
    ref = api.add(claim(UID_A, result("nic0", driver="net.example.com", pool="other")))
    async with driver(root, api, Profile()) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        stub = pb_grpc.DRAPluginStub(channel)
        response = await stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        assert _answer(response) == {UID_A: {"error": "", "devices": []}}
        assert d.service.checkpoint.load() == {}
        assert not d.cdi_dir.exists() or list(d.cdi_dir.iterdir()) == []


async def test_health_stream_sends_full_state_then_changes(root: Path) -> None:
    profile = Profile()
    async with driver(root, ApiServer(), profile) as d, kubelet(d.sockets.paths.registrar) as (channel, _):
        modules: tuple[tuple[Any, Any], ...] = (
            (health_v1, health_v1_grpc.DRAResourceHealthStub),
            (health_v1alpha1, health_v1alpha1_grpc.DRAResourceHealthStub),
        )
        for module, stub_class in modules:
            profile.current = inventory("card0", "card1")
            d.service.inventory_changed(profile.current)
            stream: Any = stub_class(channel).NodeWatchResources(module.NodeWatchResourcesRequest())
            first = await asyncio.wait_for(stream.read(), 5)
            assert [(h.device.pool_name, h.device.device_name, h.health) for h in first.devices] == [
                (NODE, "card0", module.HEALTHY),
                (NODE, "card1", module.HEALTHY),
            ]
            d.service.inventory_changed(profile.current)  # same health: nothing is sent
            profile.current = Inventory(devices=(device("card0"), device("card1", Health.UNHEALTHY, "hang")))
            d.service.inventory_changed(profile.current)
            second = await asyncio.wait_for(stream.read(), 5)
            assert [(h.device.device_name, h.health, h.message) for h in second.devices] == [
                ("card0", module.HEALTHY, ""),
                ("card1", module.UNHEALTHY, "hang"),
            ]
            assert all(h.last_updated_time > 0 for h in second.devices)
            # The kubelet keeps each report this long (not its 30 s default): the resend can be rare.
            assert {h.health_check_timeout_seconds for h in (*first.devices, *second.devices)} == {
                HEALTH_CHECK_TIMEOUT
            }
            assert HEALTH_RESEND_INTERVAL <= HEALTH_CHECK_TIMEOUT / 3
            stream.cancel()


async def test_health_is_resent_before_the_kubelet_calls_it_stale(root: Path) -> None:
    async with (
        driver(root, ApiServer(), Profile(), health_resend_interval=0.05) as d,
        kubelet(d.sockets.paths.registrar) as (channel, _),
    ):
        stream: Any = health_v1_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
            health_v1.NodeWatchResourcesRequest()
        )
        reports = [await asyncio.wait_for(stream.read(), 5) for _ in range(3)]
        assert all(len(r.devices) == 2 for r in reports)
        stream.cancel()
