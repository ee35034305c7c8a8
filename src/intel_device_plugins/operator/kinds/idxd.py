"""The init container DSA and IAA share: it configures the idxd work queues through sysfs."""

from __future__ import annotations

from intel_device_plugins.operator.pod import (
    HostMount,
    config_volume,
    init_base,
    init_security,
    node_name_env,
)
from intel_device_plugins.operator.profile import InitParts

SHARED_QUEUES = (
    "claims share a shared work queue (allowMultipleAllocations), a dedicated one goes to one claim"
)
"""Why the DRA driver has no use for sharedDevNum."""


def idxd_init_parts(
    device_type: str, name: str, init_image: str, provisioning_config: str, dsa_driver: str = ""
) -> InitParts:
    """``dsa_driver``: the driver DSA's work queues are bound to; IAA has none and never rebinds."""
    if not init_image:
        return [], []
    env = [node_name_env(), {"name": "DEVICE_TYPE", "value": device_type}]
    if dsa_driver:
        env.append({"name": "DSA_DRIVER", "value": dsa_driver})
    host = [HostMount("sys-bus-dsa", "/sys/bus/dsa", "/sys/bus/dsa")]
    if dsa_driver:
        # rebinding writes only bind/unbind below the PCI drivers; driver_override is under /sys/devices
        host.append(HostMount("sys-bus-pci", "/sys/bus/pci/drivers", "/sys/bus/pci/drivers"))
    host.append(HostMount("sys-devices", "/sys/devices", "/sys/devices"))
    mounts = [h.mount() for h in host] + [{"name": "scratch", "mountPath": "/idxd-init/scratch"}]
    volumes = [h.volume() for h in host] + [{"name": "scratch", "emptyDir": {}}]
    if provisioning_config:
        vol = f"intel-{device_type}-config-volume"
        mounts.append({"name": vol, "mountPath": "/idxd-init/conf"})
        volumes.append(config_volume(vol, provisioning_config, None))
    container = {
        **init_base(init_image),
        "name": name,
        "env": env,
        "securityContext": init_security(writes_sysfs=True),
        "volumeMounts": mounts,
    }
    return [container], volumes
