"""FPGAs as a DRA driver (``fpga.intel.com``), on the plugin's own discovery.

Two shapes, as the plugin's modes:

* ``af``: every port is a device with its interface ID (the region's blue bitstream) and its AFU ID
  (the function programmed now) as attributes; a claim picks a function with a CEL selector.
* ``region``: every FPGA region (FME) is a device with its interface ID. Preparing gives the container
  the region's ports and the ``createRuntime`` hook, which programs the bitstream before the container
  starts, exactly as in the plugin's region mode. A claim may name the function in its opaque
  configuration (``FpgaConfig`` of ``fpga.intel.com/v1alpha1`` with ``afuId``; the bare
  ``{"afuId": "<id>"}`` is still accepted but deprecated): the container then also gets
  ``FPGA_REGION_<n>``/``FPGA_AFU_<n>``,
  which replace its own variables of those names (CDI edits apply last), so the claim wins. A claim
  naming none (the one the scheduler makes for ``fpga.intel.com/region-…``) leaves the choice to the
  container's own variables, which the FPGA webhook sets as for the plugin; the hook refuses a variable
  whose region none of the container's ports has.
  ``regiondevel`` gives the FME node instead of the hook, for development.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode, Health
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.deviceplugin.topology import TopologyError
from intel_device_plugins.dra.classes import DeviceClassSpec
from intel_device_plugins.dra.model import AllocatedDevice, AttributeValue, Device, Inventory
from intel_device_plugins.dra.parameters import ParameterKind, api_version, parameter, parameters_of
from intel_device_plugins.dra.placement import (
    PLACEMENT_DEFAULTS,
    pci_attributes_of_path,
    placement_attributes,
    stable_name,
)
from intel_device_plugins.dra.profile import ClaimPreparationError, default_claim_edits
from intel_device_plugins.dra.uniform import with_defaults
from intel_device_plugins.plugins.fpga.bitstream import canonical_id, is_safe_id
from intel_device_plugins.plugins.fpga.crihook import AFU_PREFIX, REGION_PREFIX
from intel_device_plugins.plugins.fpga.discovery import (
    CRI_HOOK_PATH,
    NAMESPACE,
    UNUSABLE_ID,
    Fme,
    Mode,
    Port,
    discover_fpgas,
)
from intel_device_plugins.plugins.fpga.plugin import FpgaPlugin

AFU_PARAMETER = "afuId"
AFU_ID_PARAMETER_PATTERN = "[0-9A-Fa-f-]*[0-9A-Fa-f][0-9A-Fa-f-]*"
# Attribute names (in the driver's domain); the DeviceClasses that map the plugin's resource names select
# on them (webhooks/fpgaclasses.py). A port (af mode) names its region, a region (region modes) counts its
# ports: which of the two a device has tells the modes apart.
INTERFACE_ATTRIBUTE = "interfaceId"
AFU_ATTRIBUTE = "afuId"
PORT_REGION_ATTRIBUTE = "region"
REGION_PORTS_ATTRIBUTE = "ports"


def dns_label(name: str) -> str:
    """``intel-fpga-port.0`` → ``intel-fpga-port-0``."""
    return name.replace(".", "-").lower()


def _port_node(prefix: str, port: Port) -> DeviceNode:
    path = f"{prefix}/dev/{port.name}"
    return DeviceNode(path, path, "rw")


def _placement(prefix: str, ports: Sequence[Port], numa: NumaCache) -> dict[str, AttributeValue]:
    nodes: set[int] = set()
    for port in ports:
        # Discovery already reports unreadable topology; the device is then published without it.
        with contextlib.suppress(TopologyError):
            nodes.update(numa(port.pci_dir))
    return placement_attributes(prefix, ports[0].pci_dir[len(prefix) :], tuple(sorted(nodes)))


def port_devices(prefix: str, ports: Sequence[Port], numa: NumaCache) -> list[Device]:
    """One device per port, named ``<PCI function>-port<k>`` (``0000-5e-00-0-port0``), ``k`` counting the
    function's ports in the kernel's order; the kernel's ``intel-fpga-port.N`` numbering follows probe
    order, so it is only the name of a port whose PCI function cannot be found."""
    devices = []
    per_function: dict[str, int] = {}
    for port in ports:
        unusable = port.afu_id == UNUSABLE_ID
        index = per_function.get(port.pci_dir, 0)
        per_function[port.pci_dir] = index + 1
        attributes: dict[str, AttributeValue] = {
            INTERFACE_ATTRIBUTE: port.fme.interface_id,
            AFU_ATTRIBUTE: port.afu_id,
            PORT_REGION_ATTRIBUTE: region_name(prefix, port.fme),
            "port": dns_label(port.name),
            **_placement(prefix, (port,), numa),
        }
        name = stable_name(attributes, dns_label(port.name), child=f"port{index}")
        devices.append(
            Device(
                name=name,
                attributes=attributes,
                cdi=CdiDevice(kind=f"{NAMESPACE}/port", name=name, nodes=(_port_node(prefix, port),)),
                health=Health.UNHEALTHY if unusable else Health.HEALTHY,
                health_message=f"{port.name} reports no usable function (being reprogrammed, or failed)"
                if unusable
                else "",
            )
        )
    return devices


def region_name(prefix: str, fme: Fme) -> str:
    """``<PCI function>-region`` for the FME of the card's physical function (``0000-5e-00-0-region``),
    or the FME's kernel name (``dfl-fme-0``) when no PCI function holds it."""
    found = pci_attributes_of_path(fme.sysfs_dir, os.path.realpath(prefix + "/sys/devices"))
    return stable_name(found, dns_label(fme.name), child="region")


def region_devices(prefix: str, ports: Sequence[Port], numa: NumaCache, devel: bool) -> list[Device]:
    regions: dict[str, list[Port]] = {}
    for port in ports:
        regions.setdefault(port.fme.name, []).append(port)
    devices = []
    for name, members in regions.items():
        fme = members[0].fme
        device_name = region_name(prefix, fme)
        nodes = tuple(_port_node(prefix, port) for port in members)
        if devel:
            cdi = CdiDevice(
                kind=f"{NAMESPACE}/region",
                name=device_name,
                nodes=(*nodes, DeviceNode(fme.node, fme.node, "rw")),
            )
        else:
            cdi = CdiDevice(
                kind=f"{NAMESPACE}/region",
                name=device_name,
                nodes=nodes,
                create_runtime_hooks=(CRI_HOOK_PATH,),
            )
        unusable = fme.interface_id == UNUSABLE_ID
        devices.append(
            Device(
                name=device_name,
                attributes={
                    INTERFACE_ATTRIBUTE: fme.interface_id,
                    AFU_ATTRIBUTE: members[0].afu_id,
                    REGION_PORTS_ATTRIBUTE: len(members),
                    "fme": dns_label(name),
                    **_placement(prefix, members, numa),
                },
                cdi=cdi,
                health=Health.UNHEALTHY if unusable else Health.HEALTHY,
                health_message=f"{name} reports no usable interface (blue bitstream being loaded, or failed)"
                if unusable
                else "",
            )
        )
    return devices


@dataclass(frozen=True)
class FpgaConfig:
    """``fpga.intel.com/v1alpha1`` ``FpgaConfig``: the function a region claim wants programmed."""

    afu_id: str | None = parameter(
        "afuId",
        pattern=AFU_ID_PARAMETER_PATTERN,
        describe="an AFU ID (hexadecimal digits, dashes allowed)",
    )


FPGA_PARAMETER_KINDS = (ParameterKind(api_version(NAMESPACE), "FpgaConfig", FpgaConfig, accepts_bare=True),)
"""The bare form ``{"afuId": …}`` (no ``apiVersion``/``kind``) is still an ``FpgaConfig``; deprecated."""


def requested_afu(result: AllocatedDevice) -> str:
    """The AFU ID the claim asks for in its opaque configuration (merged: the claim's entries win over
    the class's), or "" when it names none."""
    config = parameters_of(result.config, FpgaConfig)
    if config is None or config.afu_id is None:
        return ""
    afu = canonical_id(config.afu_id)
    if not is_safe_id(afu):
        raise ClaimPreparationError(f"request {result.request}: {AFU_PARAMETER} {afu!r} is not a valid ID")
    return afu


FPGA_DEVICE_CLASSES = (DeviceClassSpec(NAMESPACE, NAMESPACE),)
"""AF resource names encode bitstream IDs that only the cluster's objects know, so the driver ships one
class; claims select by ``interfaceId``/``afuId``, and the classes serving the plugin's names are made
from the AcceleratorFunctions and FpgaRegions (``webhooks/fpgaclasses.py``)."""


@dataclass
class FpgaDriverProfile:
    prefix: str = ""
    mode: Mode = Mode.AF
    plugin: FpgaPlugin = field(init=False)
    parameter_kinds: tuple[ParameterKind, ...] = field(init=False, default=FPGA_PARAMETER_KINDS)

    def __post_init__(self) -> None:
        self.plugin = FpgaPlugin(self.prefix, self.mode)

    @property
    def driver_name(self) -> str:
        return NAMESPACE

    def scan(self) -> Inventory:
        inventory = discover_fpgas(self.plugin.root)
        prefix = str(self.plugin.root).rstrip("/")
        if self.mode is Mode.AF:
            devices = port_devices(prefix, inventory.ports, self.plugin.numa)
        else:
            devices = region_devices(prefix, inventory.ports, self.plugin.numa, self.mode is Mode.REGIONDEVEL)
        found = Inventory(devices=tuple(devices), problems=inventory.problems)
        return with_defaults(found, PLACEMENT_DEFAULTS)

    def watch_paths(self) -> Sequence[Path]:
        return self.plugin.watch_paths()

    def uevent_subsystems(self) -> Collection[str]:
        return self.plugin.uevent_subsystems()

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        edits = default_claim_edits(self.driver_name, claim_uid, allocated)
        if self.mode is not Mode.REGION:
            return edits
        return [
            replace(edit, env=_function_env(index, result, device))
            for index, (edit, (result, device)) in enumerate(zip(edits, allocated, strict=True), start=1)
        ]


def _function_env(index: int, result: AllocatedDevice, device: Device) -> tuple[str, ...]:
    """The pair the claim's configuration asks for, or none: the container's own variables decide."""
    afu = requested_afu(result)
    if not afu:
        return ()
    return (f"{REGION_PREFIX}{index}={device.attributes[INTERFACE_ATTRIBUTE]}", f"{AFU_PREFIX}{index}={afu}")
