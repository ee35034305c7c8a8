"""``sgx_epchook``: the node's SGX EPC size, for Node Feature Discovery or as node capacity.

The size is the sum of the EPC sections the CPU reports (CPUID leaf 0x12, sub-leaves 2…). Python
cannot execute CPUID, so the leaves are read through a :data:`CpuidSource`: on a node with the
kernel's cpuid driver that is ``/dev/cpu/0/cpuid``; without it (the module is often not loaded, and
the device needs privileges) the kernel's own account in
``/sys/devices/system/node/node*/x86/sgx_total_bytes`` (Linux 6.0+) is used. Both are pure functions
of a filesystem root, so tests and the node simulator inject either.

Without ``-register`` the hook prints ``sgx.intel.com/epc=<bytes>`` (NFD's hook format). With it,
the thin shell at the bottom JSON-patches ``/status/capacity/sgx.intel.com~1epc`` of the node
``$NODE_NAME`` through the in-cluster API endpoint and service-account token.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import ssl
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging
from intel_device_plugins.sysfs import list_dir, prefixed, read_int

log = logging.getLogger(__name__)

EPC_RESOURCE = "sgx.intel.com/epc"
CAPABLE_LABEL = "sgx.intel.com/capable"
CPUID_DEVICE = "/dev/cpu/0/cpuid"
NODE_SYSFS = "/sys/devices/system/node"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_EPC_SECTIONS = 64
"""Sub-leaves probed at most; real CPUs have one section per socket."""

CpuidSource = Callable[[int, int], tuple[int, int, int, int]]
"""(leaf, sub-leaf) → (eax, ebx, ecx, edx)."""


class EpcError(RuntimeError):
    """The EPC size cannot be determined or registered; the message says why."""


# ----- pure core ---------------------------------------------------------------------------------


def epc_sections(cpuid: CpuidSource) -> list[int]:
    """Sizes of the EPC sections CPUID enumerates; empty without SGX.

    SGX needs CPUID leaf 7 EBX bit 2 and a maximum leaf of at least 0x12. Sub-leaf 2 onwards of
    leaf 0x12 describe one section each while EAX[3:0] is 1; the size is ECX[31:12] (low bits) plus
    EDX[19:0] (bits 32 and up).
    """
    max_leaf = cpuid(0, 0)[0]
    if max_leaf < 0x12:
        return []
    if not cpuid(7, 0)[1] & (1 << 2):
        return []
    sizes = []
    for subleaf in range(2, 2 + MAX_EPC_SECTIONS):
        eax, _ebx, ecx, edx = cpuid(0x12, subleaf)
        if eax & 0xF != 1:
            break
        sizes.append((ecx & 0xFFFFF000) | ((edx & 0xFFFFF) << 32))
    return sizes


def cpuid_from_reader(pread: Callable[[int, int], bytes]) -> CpuidSource:
    """A CPUID source over the cpuid driver's file interface.

    The driver answers a 16-byte read at offset ``leaf | sub-leaf << 32`` with EAX, EBX, ECX, EDX
    (little endian); ``pread(size, offset)`` performs that read.
    """

    def cpuid(leaf: int, subleaf: int) -> tuple[int, int, int, int]:
        data = pread(16, leaf | (subleaf << 32))
        if len(data) != 16:
            raise EpcError(f"short read from the cpuid device for leaf {leaf:#x}.{subleaf}")
        eax, ebx, ecx, edx = struct.unpack("<4I", data)
        return eax, ebx, ecx, edx

    return cpuid


def sysfs_epc_bytes(prefix: str) -> int | None:
    """Sum of ``sgx_total_bytes`` over NUMA nodes; ``None`` when no node has the attribute."""
    node_dir = prefixed(prefix, NODE_SYSFS)
    values = [
        read_int(node_dir / name / "x86" / "sgx_total_bytes")
        for name in list_dir(node_dir) or []
        if name.startswith("node") and name[4:].isdigit()
    ]
    found = [value for value in values if value is not None]
    return sum(found) if found else None


def binary_si(size: int) -> str:
    """A byte count as a Kubernetes quantity in BinarySI form (``64Gi``, ``1536Mi``, ``1000``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = 1024 ** ("KMGTPE".index(suffix[0]) + 1)
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def node_patch(epc: int, *, register: bool, node_label: bool) -> list[dict[str, str]]:
    """The JSON patch: EPC capacity when registering, the capable label when asked and EPC exists."""
    patch = []
    if register:
        patch.append({"op": "add", "path": "/status/capacity/sgx.intel.com~1epc", "value": binary_si(epc)})
    if node_label and epc > 0:
        patch.append({"op": "add", "path": "/metadata/labels/sgx.intel.com~1capable", "value": "true"})
    return patch


def nfd_line(epc: int) -> str:
    return f"{EPC_RESOURCE}={epc}"


# ----- reading the EPC size from a node ----------------------------------------------------------


def open_cpuid_device(path: Path) -> CpuidSource | None:
    """The cpuid driver's device as a source, or ``None`` when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None

    def pread(size: int, offset: int) -> bytes:
        try:
            return os.pread(fd, size, offset)
        except OSError as error:
            raise EpcError(f"cannot read {path}: {error.strerror}") from error

    return cpuid_from_reader(pread)


def epc_size(prefix: str, cpuid: CpuidSource | None = None) -> tuple[int, str]:
    """EPC bytes and where they came from: the given CPUID source, the cpuid device, or sysfs."""
    source = "injected CPUID"
    if cpuid is None:
        device = prefixed(prefix, CPUID_DEVICE)
        cpuid = open_cpuid_device(device)
        source = str(device)
    if cpuid is not None:
        try:
            return sum(epc_sections(cpuid)), source
        except EpcError as error:
            log.warning("%s; trying sysfs", error)
    from_sysfs = sysfs_epc_bytes(prefix)
    if from_sysfs is not None:
        return from_sysfs, str(prefixed(prefix, NODE_SYSFS)) + "/node*/x86/sgx_total_bytes"
    return 0, "nowhere (no cpuid device, no sgx_total_bytes in sysfs)"


# ----- thin shell: the API server ----------------------------------------------------------------


@dataclass(frozen=True)
class ApiServer:
    """Where and how to reach the Kubernetes API."""

    base_url: str
    token: str
    ssl_context: ssl.SSLContext | None = None


def in_cluster(environ: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiServer:
    """The in-cluster API endpoint with this pod's service-account token and CA."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise EpcError("not running in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    try:
        token = (account_dir / "token").read_text(encoding="utf-8").strip()
        context = ssl.create_default_context(cafile=str(account_dir / "ca.crt"))
    except OSError as error:
        raise EpcError(f"cannot read the service account in {account_dir}: {error}") from error
    if ":" in host:
        host = f"[{host}]"
    return ApiServer(f"https://{host}:{port}", token, context)


def patch_node_status(api: ApiServer, node: str, patch: list[dict[str, str]], timeout: float = 10.0) -> None:
    """Apply a JSON patch through the node's ``status`` subresource; raises :class:`EpcError`."""
    request = urllib.request.Request(
        f"{api.base_url}/api/v1/nodes/{urllib.parse.quote(node, safe='')}/status",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={
            "Authorization": f"Bearer {api.token}",
            "Content-Type": "application/json-patch+json",
            "Accept": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=api.ssl_context) as response:
            response.read()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:500]
        raise EpcError(f"patching node {node} failed: HTTP {error.code}: {detail}") from error
    except (urllib.error.URLError, OSError) as error:
        raise EpcError(f"patching node {node} failed: {error}") from error


# ----- command ---------------------------------------------------------------------------------


def build_parser() -> GoFlagParser:
    parser = GoFlagParser(prog="sgx_epchook", description="Report or register the node's SGX EPC size")
    parser.add_bool_flag("register", help="write the EPC size as node capacity sgx.intel.com/epc")
    parser.add_bool_flag("affirm", help="fail when the node has no EPC")
    parser.add_bool_flag("node-label", help="label the node sgx.intel.com/capable=true when it has EPC")
    parser.add_bool_flag("daemon", help="stay running until SIGTERM or SIGINT (for a DaemonSet)")
    parser.add_flag("prefix", default="", help="path prefix for /sys and /dev (testing)")
    add_verbosity_flag(parser)
    return parser


def run(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    api_factory: Callable[[], ApiServer],
    out: Any = sys.stdout,
) -> int:
    """The hook's work, with the environment and the API endpoint passed in."""
    epc, source = epc_size(args.prefix)
    log.info("EPC size %d bytes, read from %s", epc, source)
    if args.affirm and epc == 0:
        log.error("SGX EPC is not available")
        return 1
    patch = node_patch(epc, register=args.register, node_label=args.node_label)
    if patch:
        node = environ.get("NODE_NAME", "")
        if not node:
            log.error("NODE_NAME is not set; cannot update the node")
            return 1
        try:
            patch_node_status(api_factory(), node, patch)
        except EpcError as error:
            log.error("%s", error)
            return 1
        log.info("node %s updated: %s", node, json.dumps(patch))
    if not args.register:
        out.write(nfd_line(epc))
        out.flush()
    return 0


TERMINATION_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbosity)
    if args.daemon:
        # Blocked from the start, so a SIGTERM that arrives while registering is not lost.
        signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION_SIGNALS)
    code = run(args, os.environ, lambda: in_cluster(os.environ))
    if code == 0 and args.daemon:
        signal.sigwait(TERMINATION_SIGNALS)
    return code
