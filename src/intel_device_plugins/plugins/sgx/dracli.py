"""``intel_sgx_dra_driver``: the SGX enclave and provisioning devices, EPC as capacity (``sgx.intel.com``).

Only the shared DRA flags. The plugin's ``-enclave-limit`` and ``-provision-limit`` count containers
per node; here both devices may be held by any number of claims and EPC is what the scheduler counts.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from intel_device_plugins.dra.cli import new_driver_parser, run_driver_command
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.sgx.dra import SgxDriverProfile

PROGRAM = "intel_sgx_dra_driver"


def build_parser() -> GoFlagParser:
    return new_driver_parser(PROGRAM, "Kubernetes DRA driver for Intel SGX (sgx.intel.com).")


def build_profile(args: argparse.Namespace) -> SgxDriverProfile:
    return SgxDriverProfile(prefix=args.prefix)


def main(argv: Sequence[str] | None = None) -> int:
    return run_driver_command(build_parser(), build_profile, argv)


if __name__ == "__main__":
    raise SystemExit(main())
