"""Builders the DRA tests share: a tiny profile, inventories and claims as the API server returns them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode, Health
from intel_device_plugins.dra.model import AllocatedDevice, Device, Inventory
from intel_device_plugins.dra.profile import default_claim_edits

DRIVER = "gpu.example.com"
NODE = "node-a"


def device(name: str, health: Health = Health.HEALTHY, message: str = "") -> Device:
    return Device(
        name=name,
        cdi=CdiDevice(
            kind="unused/kind",
            name=name,
            nodes=(DeviceNode(f"/dev/dri/{name}", f"/dev/dri/{name}"),),
            env=(f"DEVICE_{name.upper()}=1",),
        ),
        health=health,
        health_message=message,
    )


def inventory(*names: str) -> Inventory:
    return Inventory(devices=tuple(device(name) for name in names))


@dataclass
class Profile:
    """A driver profile with a fixed inventory and the framework's default claim edits."""

    current: Inventory = field(default_factory=lambda: inventory("card0", "card1"))
    driver_name: str = DRIVER

    def scan(self) -> Inventory:
        return self.current

    def watch_paths(self) -> Sequence[Path]:
        return ()

    def uevent_subsystems(self) -> Collection[str]:
        return ()

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)


def result(
    device: str, request: str = "gpu", driver: str = DRIVER, pool: str = NODE, **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def claim(uid: str, *results: dict[str, Any], name: str = "claim", namespace: str = "ns") -> dict[str, Any]:
    """A ResourceClaim as ``GET`` returns it, allocated with ``results``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": {"allocation": {"devices": {"results": list(results)}, "nodeSelector": {}}},
    }
