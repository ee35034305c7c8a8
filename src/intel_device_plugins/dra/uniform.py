"""Every device of a driver carries every attribute and capacity a selector may name.

Kubernetes evaluates a claim's CEL selectors on every candidate device, and a selector that reads an
attribute a device lacks is an error that aborts the whole allocation, not a mismatch that skips the
device. So a driver publishes each of its attributes on all its devices, with a value that matches no
real one where the device has none (``Unknown``, ``0``, ``-1``, ``false``, ``""``), as Intel's drivers
publish ``model: Unknown``. The standard ``resource.kubernetes.io/*`` attributes are the exception:
they stay absent where they do not apply, because ``matchAttribute`` constraints treat an absent
attribute as "not aligned" where a placeholder would align every device that lacks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from intel_device_plugins.dra.model import AttributeValue, Capacity, Device, Inventory

UNKNOWN = "Unknown"
"""A string attribute whose value cannot be read (Intel's drivers' spelling)."""


def with_defaults(
    inventory: Inventory,
    attributes: Mapping[str, AttributeValue],
    capacity: Mapping[str, Capacity] | None = None,
) -> Inventory:
    """``inventory`` with each device given the ``attributes`` and ``capacity`` it lacks, as defaulted."""
    capacities = capacity or {}

    def filled(device: Device) -> Device:
        missing = {name: value for name, value in attributes.items() if name not in device.attributes}
        missing_capacity = {name: value for name, value in capacities.items() if name not in device.capacity}
        if not missing and not missing_capacity:
            return device
        return replace(
            device,
            attributes={**device.attributes, **missing},
            capacity={**device.capacity, **missing_capacity},
        )

    return replace(inventory, devices=tuple(filled(device) for device in inventory.devices))
