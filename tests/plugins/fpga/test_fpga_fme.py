"""FME/port ioctls: request numbers and structures per driver, and the simulated FME."""

from __future__ import annotations

import ctypes
import errno
import struct
from pathlib import Path

import pytest

from intel_device_plugins.plugins.fpga import fme
from intel_device_plugins.plugins.fpga.devices import DFL, OPAE
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree


class Recorder:
    """An FpgaIoctl that records each call (copying buffers and PR payloads) and answers 0."""

    def __init__(self, fail: int | None = None, fill: bytes | None = None) -> None:
        self.calls: list[tuple[Path, int, int | bytes]] = []
        self.payloads: list[bytes] = []
        self.fail = fail
        self.fill = fill

    def ioctl(self, node: Path, request: int, argument: int | bytearray) -> int:
        self.calls.append((node, request, argument if isinstance(argument, int) else bytes(argument)))
        if request in (0xB580, 0xB680) and isinstance(argument, bytearray):
            size, address = struct.unpack_from("<IQ", argument, 12)
            self.payloads.append(ctypes.string_at(address, size))
        if self.fill is not None and isinstance(argument, bytearray):
            argument[: len(self.fill)] = self.fill
        if self.fail is not None:
            raise OSError(self.fail, "simulated failure")
        return 0


NODE = Path("/dev/fme")


def test_dfl_pr_structure_and_request() -> None:
    recorder = Recorder()
    fme.port_pr(recorder, NODE, DFL, 3, bytearray(b"bits" * 5))
    [(node, request, argument)] = recorder.calls
    assert (node, request) == (NODE, 0xB680)
    assert isinstance(argument, bytes) and len(argument) == 24
    argsz, flags, port_id, size, address = struct.unpack("<IIIIQ", argument)
    assert (argsz, flags, port_id, size) == (24, 0, 3, 20)
    assert address != 0
    assert recorder.payloads == [b"bits" * 5]


def test_opae_pr_structure_and_request() -> None:
    recorder = Recorder()
    fme.port_pr(recorder, NODE, OPAE, 1, bytearray(b"x" * 7))
    [(_, request, argument)] = recorder.calls
    assert request == 0xB580
    assert isinstance(argument, bytes) and len(argument) == 32
    argsz, flags, port_id, size, _address, status = struct.unpack("<IIIIQQ", argument)
    assert (argsz, flags, port_id, size, status) == (32, 0, 1, 7, 0)
    assert recorder.payloads == [b"x" * 7]


@pytest.mark.parametrize(
    ("driver", "release", "assign", "argument"),
    [
        (DFL, 0x4004B681, 0x4004B682, struct.pack("<I", 2)),
        (OPAE, 0xB581, 0xB582, struct.pack("<III", 12, 0, 2)),
    ],
)
def test_release_and_assign(driver: str, release: int, assign: int, argument: bytes) -> None:
    recorder = Recorder()
    fme.port_release(recorder, NODE, driver, 2)
    fme.port_assign(recorder, NODE, driver, 2)
    assert [(request, arg) for _, request, arg in recorder.calls] == [(release, argument), (assign, argument)]


@pytest.mark.parametrize(
    ("driver", "numbers"),
    [(DFL, (0xB600, 0xB601, 0xB640, 0xB641, 0xB642)), (OPAE, (0xB500, 0xB501, 0xB540, 0xB541, 0xB542))],
)
def test_info_requests(driver: str, numbers: tuple[int, ...]) -> None:
    recorder = Recorder()
    fme.api_version(recorder, NODE, driver)
    fme.check_extension(recorder, NODE, driver)
    fme.port_reset(recorder, NODE, driver)
    fme.port_info(recorder, NODE, driver)
    fme.region_info(recorder, NODE, driver, 0)
    assert tuple(request for _, request, _ in recorder.calls) == numbers
    info_argument = recorder.calls[3][2]
    assert isinstance(info_argument, bytes)
    assert struct.unpack_from("<I", info_argument)[0] == (16 if driver == DFL else 24)


def test_port_info_decodes_each_drivers_layout() -> None:
    assert fme.port_info(Recorder(fill=struct.pack("<IIII", 16, 1, 2, 3)), NODE, DFL) == fme.PortInfo(1, 2, 3)
    opae = struct.pack("<IIIIII", 24, 1, 9, 2, 3, 4)
    assert fme.port_info(Recorder(fill=opae), NODE, OPAE) == fme.PortInfo(1, 2, 3)


def test_failures_name_the_operation_and_node() -> None:
    with pytest.raises(fme.FpgaIoctlError, match=r"partial reconfiguration of port 0 on /dev/fme failed"):
        fme.port_pr(Recorder(fail=errno.EIO), NODE, DFL, 0, bytearray(b"x"))
    with pytest.raises(fme.FpgaIoctlError, match="has no raw data"):
        fme.port_pr(Recorder(), NODE, DFL, 0, bytearray())
    with pytest.raises(fme.FpgaIoctlError, match="release of port 4 on /dev/fme failed"):
        fme.port_release(Recorder(fail=errno.EBUSY), NODE, OPAE, 4)


def test_real_ioctls_on_a_regular_file_fail_cleanly(tmp_path: Path) -> None:
    node = tmp_path / "dfl-fme.0"
    node.write_bytes(b"")
    with pytest.raises(fme.FpgaIoctlError, match=r"API version on .* failed"):
        fme.api_version(fme.DeviceIoctl(), node, DFL)


# ----- the simulated FME -------------------------------------------------------------------------


@pytest.fixture(params=[DFL, OPAE])
def card(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, simfpga.SimulatedFpga]:
    tree = FakeTree(tmp_path)
    simfpga.add_fpga(tree, driver=request.param, ports=1)  # another card first: indexes differ
    return tmp_path, simfpga.add_fpga(tree, driver=request.param, ports=2, vfs=1)


def afu_of(root: Path, port: simfpga.SimulatedPort) -> str:
    return (root / port.sysfs.lstrip("/") / "afu_id").read_text().strip()


def test_simulated_pr_programs_the_port_with_that_id(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    root, fpga = card
    simulated = fme.SimulatedFme(root)
    node = root / "dev" / fpga.fme
    for port in fpga.ports:
        fme.port_pr(
            simulated, node, fpga.driver, port.port_id, bytearray(fme.simulated_payload(simfpga.NLB3_AFU))
        )
        assert afu_of(root, port) == simfpga.NLB3_AFU
    other_card_port = "dfl-port.0" if fpga.driver == DFL else "intel-fpga-port.0"
    assert other_card_port not in {port.name for port in fpga.ports}
    other_sysfs = (root / "sys/bus/platform/devices" / other_card_port).resolve()
    assert (other_sysfs / "afu_id").read_text().strip() == simfpga.NLB0_AFU


def test_simulated_pr_with_a_foreign_payload_fails_and_leaves_the_port_unprogrammed(
    card: tuple[Path, simfpga.SimulatedFpga],
) -> None:
    root, fpga = card
    with pytest.raises(fme.FpgaIoctlError, match="Input/output error"):
        fme.port_pr(fme.SimulatedFme(root), root / "dev" / fpga.fme, fpga.driver, 0, bytearray(b"junk" * 100))
    assert afu_of(root, fpga.ports[0]) == fme.UNPROGRAMMED


def test_simulated_pr_of_an_unknown_port_is_invalid(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    root, fpga = card
    payload = bytearray(fme.simulated_payload(simfpga.NLB3_AFU))
    with pytest.raises(fme.FpgaIoctlError, match="Invalid argument"):
        fme.port_pr(fme.SimulatedFme(root), root / "dev" / fpga.fme, fpga.driver, 9, payload)


def test_simulated_pr_is_refused_on_a_port_node_and_wrong_driver_requests(
    card: tuple[Path, simfpga.SimulatedFpga],
) -> None:
    root, fpga = card
    simulated = fme.SimulatedFme(root)
    payload = bytearray(fme.simulated_payload(simfpga.NLB3_AFU))
    with pytest.raises(fme.FpgaIoctlError, match="Inappropriate ioctl"):
        fme.port_pr(simulated, root / "dev" / fpga.ports[0].name, fpga.driver, 0, payload)
    other = OPAE if fpga.driver == DFL else DFL
    with pytest.raises(fme.FpgaIoctlError, match="Inappropriate ioctl"):
        fme.api_version(simulated, root / "dev" / fpga.fme, other)


def test_simulated_release_and_assign(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    root, fpga = card
    simulated = fme.SimulatedFme(root)
    node = root / "dev" / fpga.fme
    fme.port_release(simulated, node, fpga.driver, 1)
    with pytest.raises(fme.FpgaIoctlError, match="Device or resource busy"):
        fme.port_release(simulated, node, fpga.driver, 1)
    with pytest.raises(fme.FpgaIoctlError, match="Device or resource busy"):
        fme.port_pr(simulated, node, fpga.driver, 1, bytearray(fme.simulated_payload(simfpga.NLB3_AFU)))
    fme.port_assign(simulated, node, fpga.driver, 1)
    with pytest.raises(fme.FpgaIoctlError, match="Invalid argument"):
        fme.port_assign(simulated, node, fpga.driver, 1)


def test_simulated_port_info_and_regions(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    root, fpga = card
    simulated = fme.SimulatedFme(root)
    node = root / "dev" / fpga.ports[0].name
    assert fme.api_version(simulated, node, fpga.driver) == 0
    assert fme.port_info(simulated, node, fpga.driver).regions == 1
    assert fme.region_info(simulated, node, fpga.driver, 0) == fme.RegionInfo(0x7, 0, 0x40000, 0)
    with pytest.raises(fme.FpgaIoctlError, match="region 1 info"):
        fme.region_info(simulated, node, fpga.driver, 1)
    with pytest.raises(fme.FpgaIoctlError, match="No such device"):
        fme.api_version(simulated, root / "dev" / "dfl-port.99", fpga.driver)


# ----- the backend the node's sysfs names --------------------------------------------------------


def test_the_simulator_marks_every_fpga_device_it_makes(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    root, fpga = card
    for name in (fpga.fme, *(port.name for port in fpga.ports)):
        assert fme.is_simulated_device(root, name), name
    assert not fme.is_simulated_device(root, "dfl-fme.9")


def test_a_marked_fme_is_answered_by_the_simulated_fme_and_the_driver_is_never_called(
    card: tuple[Path, simfpga.SimulatedFpga],
) -> None:
    root, fpga = card
    driver = Recorder(fail=errno.ENXIO)
    selected = fme.SysfsSelectedIoctl(root, device=driver)
    payload = bytearray(fme.simulated_payload(simfpga.NLB3_AFU))
    fme.port_pr(selected, root / "dev" / fpga.fme, fpga.driver, fpga.ports[0].port_id, payload)
    assert afu_of(root, fpga.ports[0]) == simfpga.NLB3_AFU
    assert driver.calls == []
    assert [name for name, _ in selected.simulated.calls] == [fpga.fme]


def test_an_unmarked_fme_goes_to_its_driver_as_on_hardware(card: tuple[Path, simfpga.SimulatedFpga]) -> None:
    """Without the marker (every FME on hardware) the driver gets the very ioctl DeviceIoctl would
    issue, and its failure is the hook's; the simulated FME is never asked."""
    root, fpga = card
    marker = root / "sys/bus/platform/devices" / fpga.fme / fme.SIMULATION_MARKER
    marker.unlink()
    driver = Recorder(fail=errno.ENXIO)
    selected = fme.SysfsSelectedIoctl(root, device=driver)
    payload = bytearray(fme.simulated_payload(simfpga.NLB3_AFU))
    with pytest.raises(fme.FpgaIoctlError, match=r"partial reconfiguration of port 0 on .* failed"):
        fme.port_pr(selected, root / "dev" / fpga.fme, fpga.driver, 0, payload)
    assert [(node, request) for node, request, _ in driver.calls] == [
        (root / "dev" / fpga.fme, 0xB680 if fpga.driver == DFL else 0xB580)
    ]
    assert selected.simulated.calls == []
    assert afu_of(root, fpga.ports[0]) == simfpga.NLB0_AFU


def test_the_default_backend_of_an_unmarked_device_is_the_real_ioctl() -> None:
    assert isinstance(fme.SysfsSelectedIoctl(Path("/")).device, fme.DeviceIoctl)
