"""The GPU DeviceClasses shipped in deploy/dra/gpu (and, equal, in its chart) are what the DRA framework's
DeviceClass builder makes of the GPU driver's class facts, so they look like every other kind's."""

from __future__ import annotations

from pathlib import Path

import yaml

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_gpu_device_classes_are_the_shared_builders() -> None:
    path = DEPLOY / "dra" / "gpu" / "deviceclasses" / "deviceclasses.yaml"
    shipped = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert shipped == [device_class(spec) for spec in GPU_DEVICE_CLASSES]
