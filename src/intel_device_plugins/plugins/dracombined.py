"""``intel_dra_drivers``: the DRA drivers of several device kinds from one process.

As ``intel_device_plugins`` does for device plugins, one event loop serves any set of kinds::

    intel_dra_drivers -node-name n1 --driver gpu --driver 'qat -mode kernel' --driver dsa

Each ``--driver`` value is a kind followed by that kind's own flags, exactly as its standalone
``intel_<kind>_dra_driver`` takes them. The shared DRA flags (``-node-name``, ``-cdi-root``, the kubelet
directories, ``-kubeconfig``, ``-kube-api-qps``, ``-kube-api-burst``, ``-healthcheck-port``, ``-pod-uid``,
``-prefix``, ``-scan-interval``, ``-uevent-dir``, ``-v``) are given once, for all; one liveness service
covers every driver of the process. Every driver keeps its own name, registration socket, kubelet service and
ResourceSlices; the process shares the interpreter, the API client and the uevent source.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from intel_device_plugins.dra.cli import SHARED_FLAGS, new_driver_parser, run_drivers_command, shared_argv
from intel_device_plugins.dra.profile import DriverProfile
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.kindspec import split_kind_spec

PROGRAM = "intel_dra_drivers"

KINDS: Mapping[str, str] = MappingProxyType(
    {
        "gpu": "intel_device_plugins.plugins.gpu.dracli",
        "qat": "intel_device_plugins.plugins.qat.dracli",
        "sgx": "intel_device_plugins.plugins.sgx.dracli",
        "dsa": "intel_device_plugins.plugins.dsa.dracli",
        "iaa": "intel_device_plugins.plugins.iaa.dracli",
        "dlb": "intel_device_plugins.plugins.dlb.dracli",
        "npu": "intel_device_plugins.plugins.npu.dracli",
        "fpga": "intel_device_plugins.plugins.fpga.dracli",
    }
)
"""Kind → module with ``build_parser()`` and ``build_profile(args)``; imported only when used."""

_COMMON = frozenset((*SHARED_FLAGS, "v", "verbosity"))


def build_kind(spec: str, common: Sequence[str], parser: GoFlagParser) -> DriverProfile:
    """The profile for one ``--driver`` value; errors are reported through ``parser`` (exit code 2)."""
    kind, flags = split_kind_spec(spec, "--driver", KINDS, _COMMON, parser)
    module = importlib.import_module(KINDS[kind])
    kind_parser: GoFlagParser = module.build_parser()
    kind_parser.prog = f"{PROGRAM} --driver {kind}"
    kind_args = kind_parser.parse_args([*flags, *common])
    try:
        profile: DriverProfile = module.build_profile(kind_args)
    except ValueError as error:
        parser.error(f"--driver {spec!r}: {error}")
    return profile


def build_parser() -> GoFlagParser:
    parser = new_driver_parser(
        PROGRAM, "Serve the DRA drivers of several Intel device kinds from one process."
    )
    parser.add_flag(
        "driver",
        action="append",
        default=[],
        metavar="'KIND [FLAGS]'",
        help=f"a device kind and its own flags; repeatable. Kinds: {', '.join(KINDS)}",
    )
    return parser


def build_profiles(args: argparse.Namespace, parser: GoFlagParser) -> list[DriverProfile]:
    """One profile per ``--driver``, each kind once; errors go through ``parser`` (exit code 2)."""
    if not args.driver:
        parser.error("at least one --driver is needed")
    kinds = [shlex.split(spec)[0] if spec.strip() else "" for spec in args.driver]
    duplicates = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if duplicates:
        parser.error(f"--driver: kind(s) given more than once: {', '.join(duplicates)}")
    common = shared_argv(args)
    return [build_kind(spec, common, parser) for spec in args.driver]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    return run_drivers_command(parser, lambda args: build_profiles(args, parser), argv)


if __name__ == "__main__":
    raise SystemExit(main())
