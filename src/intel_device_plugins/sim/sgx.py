"""Simulated SGX (``[[sgx]]``): the in-kernel driver's device nodes and the EPC size per NUMA node.

Writes ``/dev/sgx_enclave`` and ``/dev/sgx_provision`` (plain files) and, for every NUMA node of the
simulated machine, ``/sys/devices/system/node/nodeN/x86/sgx_total_bytes`` (Linux 6.0+), which is
where ``sgx_epchook`` reads the EPC size on a node without the cpuid driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from intel_device_plugins.sim.fakefs import FakeTree, entry_options

DEFAULTS: Mapping[str, Any] = {
    "enclave": True,
    "provision": True,
    "epc_bytes_per_node": 64 * 1024**3,
}


NODES = {"enclave": "sgx_enclave", "provision": "sgx_provision"}
"""Option → misc device name (``/dev/<name>``)."""


def add_node(tree: FakeTree, name: str) -> None:
    """The driver registers misc device ``name`` (``sgx_enclave`` or ``sgx_provision``), with its event."""
    tree.device_node(f"/dev/{name}")
    tree.uevent("add", f"/sys/devices/virtual/misc/{name}", "misc", DEVNAME=name)


def remove_node(tree: FakeTree, name: str) -> None:
    """Misc device ``name`` goes away (e.g. the driver is unloaded), with its event."""
    tree.remove(f"/dev/{name}")
    tree.uevent("remove", f"/sys/devices/virtual/misc/{name}", "misc", DEVNAME=name)


def build(tree: FakeTree, entries: Sequence[Mapping[str, Any]]) -> None:
    """Build the ``[[sgx]]`` entry (one per node makes sense; later ones add nodes, never remove)."""
    for entry in entries:
        options = entry_options(entry, "sgx", DEFAULTS)
        for option, name in NODES.items():
            if options[option]:
                add_node(tree, name)
        epc = int(options["epc_bytes_per_node"])
        if epc:
            for node in range(tree.numa_nodes):
                tree.write(f"/sys/devices/system/node/node{node}/x86/sgx_total_bytes", f"{epc}\n")
