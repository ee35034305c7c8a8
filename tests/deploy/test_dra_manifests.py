"""The GPU DeviceClasses shipped in deploy/dra/gpu (and, equal, in its chart) are what the DRA framework's
DeviceClass builder makes of the GPU driver's class facts, so they look like every other kind's."""

from __future__ import annotations

from pathlib import Path

import yaml

from intel_device_plugins.dra.classes import DeviceClassSpec, device_class

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

# The GPU driver's classes as facts: all its devices, and one per kernel driver mapped to the extended
# resource the device plugin advertises for it.
GPU_DEVICE_CLASSES = (
    DeviceClassSpec("gpu.intel.com", "gpu.intel.com"),
    *(
        DeviceClassSpec(
            f"{driver}.gpu.intel.com",
            "gpu.intel.com",
            selector=f'device.attributes["gpu.intel.com"].driver == "{driver}"',
            extended_resource_name=f"gpu.intel.com/{driver}",
        )
        for driver in ("i915", "xe")
    ),
)


def test_gpu_device_classes_are_the_shared_builders() -> None:
    path = DEPLOY / "dra" / "gpu" / "deviceclasses" / "deviceclasses.yaml"
    shipped = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert shipped == [device_class(spec) for spec in GPU_DEVICE_CLASSES]
