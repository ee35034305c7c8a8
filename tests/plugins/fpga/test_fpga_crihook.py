"""intel_fpga_crihook: OCI state and config parsing, pairing, port choice, programming through a
simulated FME, and the console script driven as a runtime calls it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.plugins.fpga import crihook, fme
from intel_device_plugins.plugins.fpga.bitstream import build
from intel_device_plugins.plugins.fpga.crihook import FpgaRequest, HookError
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.process import console_script

IFACE = simfpga.ARRIA10_INTERFACE
OTHER_IFACE = "bfac4d851ee856fe8c95865ce1bbaa2d"
NLB0 = simfpga.NLB0_AFU
NLB3 = simfpga.NLB3_AFU
PR_REQUESTS = {0xB680, 0xB580}


# ----- pure parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (b"{", "can't decode OCI state from stdin"),
        (b"[]", "not a JSON object"),
        (b"{}", "'bundle' field is not set in the stdin JSON"),
        (b'{"bundle": ""}', "'bundle' field is not set in the stdin JSON"),
        (b'{"bundle": 7}', "'bundle' field is not set in the stdin JSON"),
        (b" " * (crihook.MAX_STATE_BYTES + 1), "larger than"),
    ],
)
def test_state_errors(state: bytes, message: str) -> None:
    with pytest.raises(HookError, match=message):
        crihook.parse_state(state)


def test_state_gives_bundle_and_annotations() -> None:
    state = {
        "ociVersion": "1.2.0",
        "id": "c1",
        "bundle": "/run/b",
        "annotations": {crihook.MODE_ANNOTATION: "x"},
    }
    bundle, annotations = crihook.parse_state(json.dumps(state).encode())
    assert bundle == Path("/run/b")
    assert annotations == {crihook.MODE_ANNOTATION: "x"}


DEVICE = {"path": "/dev/dfl-port.0", "type": "c", "major": 236, "minor": 0}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b"nope", "can't decode /b/config.json"),
        (json.dumps({"linux": {"devices": [DEVICE]}}).encode(), "/b/config.json: process.env is empty"),
        (json.dumps({"process": {"env": []}}).encode(), "/b/config.json: process.env is empty"),
        (json.dumps({"process": {"env": ["A=1"]}}).encode(), "/b/config.json: linux.devices is empty"),
        (
            json.dumps({"process": {"env": ["A=1"]}, "linux": {"devices": [{"type": "c"}]}}).encode(),
            r"linux.devices\[0\] has no path",
        ),
    ],
)
def test_config_errors(config: bytes, message: str) -> None:
    with pytest.raises(HookError, match=message):
        crihook.parse_config(Path("/b/config.json"), config)


def test_config_devices() -> None:
    config = {
        "process": {"env": ["A=1", 5]},
        "linux": {"devices": [DEVICE, {"path": "/dev/x", "major": True}]},
    }
    env, devices = crihook.parse_config(Path("c"), json.dumps(config).encode())
    assert env == ["A=1"]
    assert devices == [
        crihook.DeviceEntry("/dev/dfl-port.0", "c", 236, 0),
        crihook.DeviceEntry("/dev/x", "", None, None),
    ]


def test_requests_pair_by_suffix_canonicalise_and_skip_entries_without_equals() -> None:
    env = [
        "PATH=/bin",
        "FPGA_REGION_10= CE489693-98F0-5F33-946D-560708BE108A ",
        "FPGA_REGION_2",  # no '=': upstream crashed here
        f"FPGA_AFU_10={NLB3.upper()}",
        f"FPGA_REGION_2={IFACE}",
        f"FPGA_AFU_2={NLB0}",
    ]
    assert crihook.fpga_requests(env) == [FpgaRequest("2", IFACE, NLB0), FpgaRequest("10", IFACE, NLB3)]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (["A=1"], "No FPGA_REGION_\\* environment variables are set"),
        ([f"FPGA_REGION_1={IFACE}"], "No FPGA_AFU_\\* environment variables are set"),
        ([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_2={NLB0}"], "Environment variable FPGA_AFU_1 is not set"),
        ([f"FPGA_REGION_1=../../etc/{IFACE}", f"FPGA_AFU_1={NLB0}"], "FPGA_REGION_1='../../etc/"),
        (
            [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=../../../root/x"],
            "FPGA_AFU_1='../../../root/x' is not a valid ID",
        ),
        ([f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=a.b"], "FPGA_AFU_1='a.b' is not a valid ID"),
        ([f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1="], "FPGA_AFU_1='' is not a valid ID"),
    ],
)
def test_request_errors(env: list[str], message: str) -> None:
    with pytest.raises(HookError, match=message) as caught:
        crihook.fpga_requests(env)
    assert str(caught.value).startswith(crihook.REQUEST_PREFIX)


def test_bitstream_path_prefers_gbs_and_refuses_paths_leaving_the_store() -> None:
    store = Path("/srv/intel.com/fpga")
    existing = {store / IFACE / f"{NLB0}.aocx", store / IFACE / f"{NLB0}.gbs"}
    assert crihook.bitstream_path(store, IFACE, NLB0, existing.__contains__) == store / IFACE / f"{NLB0}.gbs"
    only_aocx = {store / IFACE / f"{NLB0}.aocx"}
    assert (
        crihook.bitstream_path(store, IFACE, NLB0, only_aocx.__contains__) == store / IFACE / f"{NLB0}.aocx"
    )
    with pytest.raises(HookError, match=f"{IFACE}/{NLB3}: bitstream not found"):
        crihook.bitstream_path(store, IFACE, NLB3, existing.__contains__)
    with pytest.raises(HookError, match="not a valid bitstream name"):
        crihook.bitstream_path(store, "..", NLB0, lambda path: True)


# ----- against a simulated node ------------------------------------------------------------------


@dataclass
class Node:
    root: Path
    cards: list[simfpga.SimulatedFpga]
    bundle: Path

    def ports(self) -> list[simfpga.SimulatedPort]:
        return [port for card in self.cards for port in card.ports]

    def afu(self, port: simfpga.SimulatedPort) -> str:
        return (self.root / port.sysfs.lstrip("/") / "afu_id").read_text().strip()

    def write_config(
        self, env: Sequence[str], ports: Sequence[simfpga.SimulatedPort], extra: Sequence[Any] = ()
    ) -> bytes:
        driver = self.cards[0].driver
        devices = [
            {
                "path": f"/dev/{port.name}",
                "type": "c",
                "major": simfpga.PORT_MAJOR[driver],
                "minor": minor(port),
            }
            for port in ports
        ]
        config = {"process": {"env": ["PATH=/usr/bin", *env]}, "linux": {"devices": [*devices, *extra]}}
        (self.bundle / "config.json").write_text(json.dumps(config))
        return json.dumps(
            {"ociVersion": "1.2.0", "id": "c", "status": "creating", "bundle": str(self.bundle)}
        ).encode()


def minor(port: simfpga.SimulatedPort) -> int:
    return int(port.name.rsplit(".", 1)[1])


@pytest.fixture(params=[simfpga.DFL, simfpga.OPAE])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Node:
    root = tmp_path / "node"
    tree = FakeTree(root)
    cards = [
        simfpga.add_fpga(tree, driver=request.param, ports=2, vfs=1),
        simfpga.add_fpga(tree, driver=request.param, ports=1, interface_id=OTHER_IFACE),
    ]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    build.install_simulated_gbs(root, IFACE, NLB3, fme.simulated_payload(NLB3))
    return Node(root, cards, bundle)


def test_already_programmed_ports_are_left_alone_for_every_pair(node: Node) -> None:
    ports = node.cards[0].ports
    state = node.write_config(
        [f"FPGA_REGION_{i}={IFACE}" for i in range(3)] + [f"FPGA_AFU_{i}={NLB0}" for i in range(3)], ports
    )
    simulated = fme.SimulatedFme(node.root)
    outcomes = crihook.run_hook(state, node.root, simulated)
    assert [(o.port, o.programmed) for o in outcomes] == [(port.name, None) for port in ports]
    assert simulated.calls == []


def test_each_pair_is_handled_not_only_the_first_already_programmed_one(node: Node) -> None:
    first, second = node.cards[0].ports[:2]
    env = [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}", f"FPGA_REGION_2={IFACE}", f"FPGA_AFU_2={NLB3}"]
    state = node.write_config(env, [first, second])
    simulated = fme.SimulatedFme(node.root)
    outcomes = crihook.run_hook(state, node.root, simulated)
    assert [o.port for o in outcomes] == [first.name, second.name]
    assert outcomes[0].programmed is None
    assert outcomes[1].programmed == str(node.root / "srv/intel.com/fpga" / IFACE / f"{NLB3}.gbs")
    assert (node.afu(first), node.afu(second)) == (NLB0, NLB3)
    assert [request for _, request in simulated.calls] == [
        0xB680 if node.cards[0].driver == simfpga.DFL else 0xB580
    ]


def test_two_regions_with_the_same_interface_get_two_ports(node: Node) -> None:
    ports = node.cards[0].ports[:2]
    env = [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}", f"FPGA_REGION_2={IFACE}", f"FPGA_AFU_2={NLB3}"]
    outcomes = crihook.run_hook(node.write_config(env, ports), node.root, fme.SimulatedFme(node.root))
    assert sorted(o.port for o in outcomes) == sorted(port.name for port in ports)
    assert [node.afu(port) for port in ports] == [NLB3, NLB3]


def test_more_pairs_than_matching_ports_is_an_error(node: Node) -> None:
    env = [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}", f"FPGA_REGION_2={IFACE}", f"FPGA_AFU_2={NLB0}"]
    state = node.write_config(env, [node.cards[0].ports[0], node.cards[1].ports[0]])
    with pytest.raises(HookError, match=f"can't find appropriate device for region {IFACE}") as refused:
        crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))
    # The reason names the pair and what the container's ports are, so a pod whose variables ask for
    # another region than its claim or extended resource got can be told from a missing bitstream.
    taken, other = node.cards[0].ports[0].name, node.cards[1].ports[0].name
    assert "(FPGA_REGION_2)" in str(refused.value), refused.value
    assert f"{taken} in region {IFACE} (taken by an earlier pair)" in str(refused.value), refused.value
    assert f"{other} in region {OTHER_IFACE}" in str(refused.value), refused.value


def test_port_is_chosen_by_its_fme_interface(node: Node) -> None:
    other = node.cards[1].ports[0]
    build.install_simulated_gbs(node.root, OTHER_IFACE, NLB3, fme.simulated_payload(NLB3))
    state = node.write_config(
        [f"FPGA_REGION_1={OTHER_IFACE}", f"FPGA_AFU_1={NLB3}"], [*node.cards[0].ports, other]
    )
    outcomes = crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))
    assert [o.port for o in outcomes] == [other.name]
    assert node.afu(other) == NLB3
    assert {node.afu(port) for port in node.cards[0].ports} == {NLB0}


def test_a_vf_port_is_programmed_through_its_pf_fme(node: Node) -> None:
    vf_port = node.cards[0].ports[-1]
    assert vf_port.address != node.cards[0].address
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}"], [vf_port])
    simulated = fme.SimulatedFme(node.root)
    crihook.run_hook(state, node.root, simulated)
    assert node.afu(vf_port) == NLB3
    assert [name for name, _ in simulated.calls] == [node.cards[0].fme]


def test_aocx_bitstreams_are_programmed(node: Node) -> None:
    port = node.cards[0].ports[0]
    build.install_simulated_aocx(node.root, IFACE, "00c0ffee", fme.simulated_payload(build.OPENCL_AFU))
    state = node.write_config([f"FPGA_REGION_0={IFACE}", "FPGA_AFU_0=00C0FFEE"], [port])
    [outcome] = crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))
    assert outcome.programmed is not None and outcome.programmed.endswith("/00c0ffee.aocx")
    assert node.afu(port) == build.OPENCL_AFU


def failing_hook(node: Node, env: list[str], ports: Sequence[simfpga.SimulatedPort] | None = None) -> str:
    state = node.write_config(env, ports if ports is not None else node.cards[0].ports[:1])
    with pytest.raises(HookError) as caught:
        crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))
    return str(caught.value)


def test_missing_bitstream(node: Node) -> None:
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "a" * 32])
    assert message == f"{IFACE}/{'a' * 32}: bitstream not found"


def test_verification_catches_a_bitstream_that_programs_another_function(node: Node) -> None:
    mislabelled = build.install_simulated_gbs(node.root, IFACE, "b" * 32, fme.simulated_payload(NLB3))
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "b" * 32])
    assert mislabelled.exists()
    assert message.endswith(f"programmed function {NLB3} instead of {'b' * 32}")


def test_a_corrupt_payload_fails_the_pr(node: Node) -> None:
    build.install_simulated_gbs(node.root, IFACE, "c" * 32, b"not a simulated payload")
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "c" * 32])
    assert "partial reconfiguration of port 0" in message and "Input/output error" in message
    assert node.afu(node.cards[0].ports[0]) == fme.UNPROGRAMMED


def test_a_file_whose_ids_differ_from_its_name_is_refused(node: Node) -> None:
    path = node.root / "srv/intel.com/fpga" / IFACE / f"{'d' * 32}.gbs"
    path.write_bytes(build.gbs_bytes(build.gbs_metadata(IFACE, NLB3), fme.simulated_payload(NLB3)))
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "d" * 32])
    assert message == f"{path}: the file is for {NLB3}, not {'d' * 32}"


def test_a_bitstream_for_another_interface_is_refused(node: Node) -> None:
    path = node.root / "srv/intel.com/fpga" / IFACE / f"{'e' * 32}.gbs"
    path.write_bytes(
        build.gbs_bytes(build.gbs_metadata(OTHER_IFACE, "e" * 32), fme.simulated_payload("e" * 32))
    )
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "e" * 32])
    assert message.startswith(
        f"FME interface UUID '{IFACE}' is not compatible with bitstream UUID '{OTHER_IFACE}'"
    )


def test_a_malformed_bitstream_is_reported_with_its_path(node: Node) -> None:
    path = node.root / "srv/intel.com/fpga" / IFACE / f"{'a' * 32}.gbs"
    path.write_bytes(b"XeonFPGA")
    message = failing_hook(node, [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=" + "a" * 32])
    assert message == f"{path}: unable to read header: 8 bytes, a GBS header has 20"


def test_non_port_devices_are_ignored_and_no_port_is_an_error(node: Node) -> None:
    message = failing_hook(
        node,
        [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}"],
        ports=[],
    )
    assert "linux.devices is empty" in message
    extra = [
        {"path": "/dev/null", "type": "c", "major": 1, "minor": 3},
        {"path": f"/dev/{node.cards[0].fme}"},
    ]
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}"], [], extra)
    with pytest.raises(HookError, match=r"region .* the container has no FPGA port"):
        crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))


def test_a_port_missing_from_sysfs_is_reported(node: Node) -> None:
    ghost = {"path": "/dev/dfl-port.42", "type": "c", "major": 236, "minor": 42}
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}"], [], [ghost])
    with pytest.raises(
        HookError, match=r"FPGA port /dev/dfl-port.42: .*no FPGA device 'dfl-port.42' in sysfs"
    ):
        crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))


def test_missing_bundle_and_config(node: Node, tmp_path: Path) -> None:
    with pytest.raises(HookError, match=r"bundle directory: .*/gone: not a directory"):
        crihook.run_hook(
            json.dumps({"bundle": str(tmp_path / "gone")}).encode(), node.root, fme.SimulatedFme(node.root)
        )
    with pytest.raises(HookError, match=r"config\.json: No such file or directory"):
        crihook.run_hook(
            json.dumps({"bundle": str(node.bundle)}).encode(), node.root, fme.SimulatedFme(node.root)
        )


# ----- the console script, as a runtime runs it --------------------------------------------------


def run_script(state: bytes, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script("intel_fpga_crihook"), *flags],
        input=state.decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_console_script_already_programmed_exits_0(node: Node) -> None:
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB0}"], node.cards[0].ports[:1])
    result = run_script(state, "-prefix", str(node.root), "-v", "1")
    assert result.returncode == 0, result.stderr
    assert f"{node.cards[0].ports[0].name}: region {IFACE} AFU {NLB0}: already programmed" in result.stderr


def test_console_script_programs_through_the_simulated_fme(node: Node) -> None:
    port = node.cards[0].ports[1]
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}"], [port])
    result = run_script(state, "--prefix", str(node.root), "--simulate")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert node.afu(port) == NLB3


def test_console_script_failure_exits_1_with_the_reason(node: Node) -> None:
    state = node.write_config(
        [f"FPGA_REGION_1={IFACE}", "FPGA_AFU_1=../../../../etc/passwd"], node.cards[0].ports
    )
    result = run_script(state, "-prefix", str(node.root), "-simulate")
    assert result.returncode == 1
    assert "FPGA_AFU_1='../../../../etc/passwd' is not a valid ID" in result.stderr
    bad_state = run_script(b"{}", "-prefix", str(node.root))
    assert bad_state.returncode == 1
    assert bad_state.stderr.strip() == "intel_fpga_crihook: 'bundle' field is not set in the stdin JSON"


# ----- which FME backend: the node's sysfs decides, never the container -----------------------------


def test_console_script_without_simulate_programs_a_port_the_nodes_sysfs_marks(node: Node) -> None:
    """As a runtime runs it from the plugin's CDI spec on a simulated node: no -simulate (here
    -prefix stands for the node's root, which is / on the node itself)."""
    port = node.cards[0].ports[1]
    state = node.write_config([f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}"], [port])
    result = run_script(state, "-prefix", str(node.root), "-v", "1")
    assert result.returncode == 0, result.stderr
    assert f"{port.name}: region {IFACE} AFU {NLB3}: programmed" in result.stderr
    assert node.afu(port) == NLB3


def test_nothing_a_container_sets_selects_the_simulated_fme(node: Node) -> None:
    """On an unmarked node (hardware), a container asking for simulation every way it could (its
    environment, its annotations, its arguments, a marked sysfs tree in its own root file system)
    still gets the driver's ioctl, which fails here because the node's device files have no driver."""
    for marker in (node.root / "sys").rglob(fme.SIMULATION_MARKER):
        marker.unlink()
    port = node.cards[0].ports[1]
    rootfs_fme = node.bundle / "rootfs/sys/bus/platform/devices" / node.cards[0].fme
    rootfs_fme.mkdir(parents=True)
    (rootfs_fme / fme.SIMULATION_MARKER).write_text("1\n")
    node.write_config(
        [f"FPGA_REGION_1={IFACE}", f"FPGA_AFU_1={NLB3}", "SIMULATE=1", "FPGA_SIMULATE=true", "-simulate"],
        [port],
    )
    config = json.loads((node.bundle / "config.json").read_text())
    config["process"]["args"] = ["-simulate", "-prefix", str(node.bundle / "rootfs")]
    config["root"] = {"path": "rootfs"}
    config["annotations"] = {crihook.MODE_ANNOTATION: "simulate", "simulate": "true"}
    (node.bundle / "config.json").write_text(json.dumps(config))
    state = {"ociVersion": "1.2.0", "id": "c", "status": "creating", "bundle": str(node.bundle)}
    state["annotations"] = config["annotations"]
    result = run_script(json.dumps(state).encode(), "-prefix", str(node.root))
    assert result.returncode == 1
    assert f"partial reconfiguration of port {port.port_id} on" in result.stderr, result.stderr
    assert node.afu(port) == NLB0


# ----- hostile input -----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
HOSTILE = settings(max_examples=100, deadline=None)


@HOSTILE
@given(st.binary(max_size=300) | JSON_VALUES.map(lambda value: json.dumps(value).encode()))
def test_any_state_gives_a_bundle_or_a_hook_error(data: bytes) -> None:
    try:
        bundle, annotations = crihook.parse_state(data)
    except HookError as error:
        assert str(error)
    else:
        assert isinstance(bundle, Path) and isinstance(annotations, dict)


@HOSTILE
@given(JSON_VALUES, JSON_VALUES)
def test_any_config_gives_env_and_devices_or_a_hook_error(env: object, devices: object) -> None:
    data = json.dumps({"process": {"env": env}, "linux": {"devices": devices}}).encode()
    try:
        parsed_env, parsed_devices = crihook.parse_config(Path("c.json"), data)
    except HookError as error:
        assert str(error).startswith("c.json: ")
    else:
        assert all(isinstance(item, str) for item in parsed_env)
        assert all(isinstance(device.path, str) for device in parsed_devices)


ENV_NAMES = st.sampled_from(
    ["FPGA_REGION_", "FPGA_AFU_", "FPGA_REGION_1", "FPGA_AFU_1", "FPGA_AFU_x", "PATH"]
)


@HOSTILE
@given(st.lists(st.tuples(ENV_NAMES, st.sampled_from(["", "="]), st.text(max_size=40)), max_size=8))
def test_requests_from_any_environment_only_carry_ids_that_stay_in_the_store(
    entries: list[tuple[str, str, str]],
) -> None:
    env = [name + separator + value for name, separator, value in entries]
    try:
        requests = crihook.fpga_requests(env)
    except HookError as error:
        assert str(error).startswith(crihook.REQUEST_PREFIX)
    else:
        for request in requests:
            path = crihook.bitstream_path(
                Path("/srv/intel.com/fpga"), request.region, request.afu, lambda p: True
            )
            assert path.parent.parent == Path("/srv/intel.com/fpga")
            assert ".." not in path.parts


def test_a_gbs_with_padding_after_its_metadata_is_programmed(node: Node) -> None:
    afu = "e" * 32
    text = json.dumps(build.gbs_metadata(IFACE, afu)).encode() + b"\0" * 100
    path = node.root / "srv/intel.com/fpga" / IFACE / f"{afu}.gbs"
    path.write_bytes(build.gbs_bytes(text, fme.simulated_payload(afu)))
    port = node.cards[0].ports[0]
    state = node.write_config([f"FPGA_REGION_0={IFACE}", f"FPGA_AFU_0={afu}"], [port])
    [outcome] = crihook.run_hook(state, node.root, fme.SimulatedFme(node.root))
    assert outcome.programmed == str(path)
    assert node.afu(port) == afu
