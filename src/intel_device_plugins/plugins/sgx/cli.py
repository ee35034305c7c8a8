"""``intel_sgx_device_plugin``: SGX enclave and provisioning resources (and optionally DCAP's)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping, Sequence

from intel_device_plugins.deviceplugin.cli import (
    GoFlagParser,
    new_parser,
    positive_int,
    run_plugin_command,
)
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.plugins.flagnames import (
    SGX_DCAP_INFRA_RESOURCES,
    SGX_ENCLAVE_LIMIT,
    SGX_PROVISION_LIMIT,
)
from intel_device_plugins.plugins.sgx.discovery import SgxLimits, pod_count
from intel_device_plugins.plugins.sgx.plugin import SgxPlugin

log = logging.getLogger(__name__)


def limits_from(args: argparse.Namespace, environ: Mapping[str, str], cpus: int) -> SgxLimits:
    default = pod_count(environ.get("PODS_PER_CORE"), cpus)
    return SgxLimits(
        enclave=args.enclave_limit if args.enclave_limit is not None else default,
        provision=args.provision_limit if args.provision_limit is not None else default,
        dcap_infra=args.dcap_infra_resources,
    )


def usable_cpus() -> int:
    """CPUs this process may run on, as Go's ``runtime.NumCPU`` counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def build_plugins(args: argparse.Namespace) -> Sequence[Scanner]:
    limits = limits_from(args, os.environ, usable_cpus())
    log.info(
        "SGX limits: enclave %d, provision %d, DCAP resources %s",
        limits.enclave,
        limits.provision,
        limits.dcap_infra,
    )
    return [SgxPlugin(limits, prefix=args.prefix)]


def build_parser() -> GoFlagParser:
    parser = new_parser("intel_sgx_device_plugin", "Intel SGX device plugin for Kubernetes")
    parser.add_flag(
        SGX_ENCLAVE_LIMIT,
        type=positive_int,
        default=None,
        help="containers per node that may use sgx.intel.com/enclave (default PODS_PER_CORE*CPUs, else 110)",
    )
    parser.add_flag(
        SGX_PROVISION_LIMIT,
        type=positive_int,
        default=None,
        help="containers per node that may use sgx.intel.com/provision (default as -enclave-limit)",
    )
    parser.add_bool_flag(
        SGX_DCAP_INFRA_RESOURCES,
        help="also advertise sgx.intel.com/qe and sgx.intel.com/registration for the DCAP services",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_plugin_command(build_parser(), build_plugins, argv)
