"""What ``intel_dsa_dra_driver`` and ``intel_iaa_dra_driver`` share: the same flags and profile shape.

Neither takes a flag of its own. ``-shared-dev-num`` has no meaning here: a shared work queue is one
device that several claims may hold at once, and the hardware arbitrates between them. DSA's
``-driver vfio-pci`` (whole functions) is the device plugin's alone: the driver publishes work queues.
"""

from __future__ import annotations

import argparse

from intel_device_plugins.dra.cli import new_driver_parser
from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.idxd.discovery import IdxdKind
from intel_device_plugins.plugins.idxd.dra import WorkQueueDriverProfile


def build_parser_for(program: str, kind: IdxdKind, accelerator: str) -> GoFlagParser:
    return new_driver_parser(
        program, f"Kubernetes DRA driver for Intel {accelerator} work queues ({kind.namespace})."
    )


def build_profile_for(kind: IdxdKind, args: argparse.Namespace) -> WorkQueueDriverProfile:
    return WorkQueueDriverProfile(kind, prefix=args.prefix)
