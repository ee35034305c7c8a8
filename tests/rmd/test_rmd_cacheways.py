"""The intel.com/l3_cache_ways device plugin: pool parsing, staying current, and serving the kubelet."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
import pytest

from intel_device_plugins.deviceplugin.manager import PluginManager
from intel_device_plugins.deviceplugin.model import ContainerAllocation, DeviceInfo
from intel_device_plugins.deviceplugin.server import FrameworkConfig
from intel_device_plugins.rmd import pki
from intel_device_plugins.rmd.cacheways import (
    CacheWaysPlugin,
    build_parser,
    build_plugins,
    device_tree,
    guaranteed_ways,
    held_outside_the_kubelet,
    merge,
)
from intel_device_plugins.rmd.client import RmdClient, TlsMaterial, Transport, client_ssl_context
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.rmd import Acl, Machine, RmdState, serve_rmd, server_tls


def test_ids_and_numa_follow_upstream() -> None:
    ways = guaranteed_ways(RmdState(Machine(guaranteed_ways="2-4")).cache_level("l3"))
    assert ways.devices == {"02": 0, "03": 0, "04": 0, "12": 1, "13": 1, "14": 1}
    tree = device_tree(ways, healthy=True)
    assert tree["l3_cache_ways"]["13"].numa_nodes == (1,)


def test_ways_handed_to_workloads_stay_advertised_and_a_new_layout_starts_over() -> None:
    rmd = RmdState(Machine(guaranteed_ways="1-6"))
    known = guaranteed_ways(rmd.cache_level("l3"))
    rmd.create({"core_ids": ["0"], "rdt": {"cache": {"max": 4, "min": 4}}})
    after = merge(known, guaranteed_ways(rmd.cache_level("l3")))
    assert after.devices == known.devices
    other = guaranteed_ways(RmdState(Machine(sockets=1, guaranteed_ways="1-2")).cache_level("l3"))
    assert merge(after, other) == other


def test_ways_taken_outside_the_kubelet_turn_unhealthy() -> None:
    """A hand-written workload takes ways the kubelet never allocated: they must not stay allocatable."""
    rmd = RmdState(Machine(sockets=1, guaranteed_ways="1-6"))
    known = guaranteed_ways(rmd.cache_level("l3"))
    rmd.create(
        {"core_ids": ["0-1"], "rdt": {"cache": {"max": 2, "min": 2}}, "uuid": "team-a/pod-rmd-workload-c1"}
    )
    rmd.create({"core_ids": ["2"], "rdt": {"cache": {"max": 3, "min": 3}}, "uuid": "team-a/by-hand"})
    rmd.create({"core_ids": ["3"], "rdt": {"cache": {"max": 0, "min": 0}}, "uuid": "team-a/shared"})
    known = merge(known, guaranteed_ways(rmd.cache_level("l3")))
    unavailable = held_outside_the_kubelet(known, rmd.cache_level("l3"), rmd.list_workloads())
    assert unavailable == {"04", "05", "06"}
    tree = device_tree(known, True, unavailable)["l3_cache_ways"]
    healthy = [i for i, d in tree.items() if d.health.value == "Healthy"]
    # 1 free way plus the pod's 2 (allocated by the kubelet, now held by its workload): what RMD can honour.
    assert len(healthy) == 3
    rmd.delete("2")
    assert held_outside_the_kubelet(known, rmd.cache_level("l3"), rmd.list_workloads()) == frozenset()


def test_ids_stay_unique_beyond_ten_numa_nodes() -> None:
    caches = RmdState(Machine(sockets=12, cpus_per_socket=1, guaranteed_ways="1-11")).cache_level("l3")
    ways = guaranteed_ways(caches)
    assert len(ways.devices) == 12 * 11
    assert ways.devices["1-11"] == 1 and ways.devices["11-1"] == 11


def test_malformed_answers_name_the_cache() -> None:
    with pytest.raises(ValueError, match="no Caches"):
        guaranteed_ways({})
    with pytest.raises(ValueError, match=r"cache 0: guaranteed pool 'x'"):
        guaranteed_ways(
            {"Caches": {"0": {"location_on_node": "0", "available_ways_pool": {"guaranteed": "x"}}}}
        )


def test_allocate_env() -> None:
    plugin = CacheWaysPlugin("https://127.0.0.1:8443", Transport(None, allow_plain_http=True))
    devices = {"05": DeviceInfo(numa_nodes=(0,)), "16": DeviceInfo(numa_nodes=(1,))}
    out = plugin.post_allocate("l3_cache_ways", devices, ["05", "16"], ContainerAllocation())
    assert dict(out.envs) == {"intel.com/l3_cache_ways": "05:0,16:1"}


def test_plain_address_needs_the_debug_flag(tmp_path: Path) -> None:
    args = build_parser().parse_args(["-rmd-address", "http://127.0.0.1:8081", "-tls-dir", str(tmp_path)])
    with pytest.raises(ValueError, match="cannot read"):
        build_plugins(args)
    ca = pki.new_ca()
    client = pki.new_client(ca)
    for name, data in (("ca.crt", ca.cert), ("tls.crt", client.cert), ("tls.key", client.key)):
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match="HTTPS only"):
        build_plugins(args)
    debug = build_parser().parse_args(["-rmd-address", "http://127.0.0.1:8081", "-insecure-plain-http"])
    assert len(build_plugins(debug)) == 1


async def test_serves_the_kubelet_and_follows_rmd(
    kubelet: KubeletStandIn, plugin_dir: Path, tmp_path: Path
) -> None:
    ca = pki.new_ca()
    server, client = pki.new_server(ca), pki.new_client(ca, key_type="rsa")
    for name, data in (("ca.pem", ca.cert), ("rmd-cert.pem", server.cert), ("rmd-key.pem", server.key)):
        (tmp_path / name).write_bytes(data)
    tls: ssl.SSLContext = server_tls(tmp_path / "ca.pem", tmp_path / "rmd-cert.pem", tmp_path / "rmd-key.pem")
    transport = Transport(client_ssl_context(TlsMaterial(ca.cert, client.cert, client.key)))
    state = RmdState(Machine(guaranteed_ways="1-3"))
    resource = "intel.com/l3_cache_ways"
    (tmp_path / "admin").mkdir()
    (tmp_path / "admin" / "plugin.pem").write_bytes(client.cert)
    async with serve_rmd(state, tls=tls, acl=Acl(admincert=tmp_path / "admin")) as url:
        plugin = CacheWaysPlugin(url, transport, refresh_s=0.1, retry_s=0.1)
        config = FrameworkConfig(device_plugin_dir=plugin_dir, cdi_dir=tmp_path / "cdi", scan_interval=0.1)
        stop = asyncio.Event()
        task = asyncio.create_task(PluginManager(plugin, config).run(stop))
        try:
            await kubelet.wait_for(lambda: len(kubelet.resources().get(resource, {})) == 6)
            reply = await kubelet.allocate(resource, ["01", "02"])
            assert reply.envs["intel.com/l3_cache_ways"] == "01:0,02:0"
            state.machine = Machine(guaranteed_ways="1-5")  # RMD reconfigured: more ways
            await kubelet.wait_for(lambda: len(kubelet.resources().get(resource, {})) == 10)
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)
        assert plugin._poller is not None
        plugin._poller.cancel()
    # RMD gone: the ways stay, unhealthy, and come back when it answers.
    async with aiohttp.ClientSession() as session:
        await plugin.refresh(RmdClient(session, transport, url))
    assert not plugin.healthy and len(device_tree(plugin.ways, plugin.healthy)["l3_cache_ways"]) == 10
    assert {d.health.value for d in device_tree(plugin.ways, plugin.healthy)["l3_cache_ways"].values()} == {
        "Unhealthy"
    }
