"""Names of the plugin flags the operator sets, shared by the plugins' parsers and the operator's argument
builders (``operator/kinds/``), so the two cannot drift apart.

Imports nothing: the operator may import this module and no other plugin code (``.importlinter``).
A name is written without its leading dash, as ``GoFlagParser.add_flag`` takes it.
"""

from __future__ import annotations

from typing import Final

SHARED_DEV_NUM: Final = "shared-dev-num"
"""DSA, GPU, IAA, NPU."""
ALLOCATION_POLICY: Final = "allocation-policy"
"""GPU, QAT."""
KERNEL_HEALTH: Final = "kernel-health"
"""DLB, DSA, FPGA, GPU, IAA, NPU, QAT: health from the kernel's signals (AER, driver binding, kind state)."""

DSA_DRIVER: Final = "driver"
FPGA_MODE: Final = "mode"

GPU_ENABLE_MONITORING: Final = "enable-monitoring"
GPU_MONITORING_MODE: Final = "monitoring-mode"
GPU_ALLOW_IDS: Final = "allow-ids"
GPU_DENY_IDS: Final = "deny-ids"
GPU_BYPATH: Final = "bypath"
GPU_CRITICAL_TAINT_EFFECT: Final = "critical-taint-effect"
GPU_WARNING_TAINT_EFFECT: Final = "warning-taint-effect"

QAT_DPDK_DRIVER: Final = "dpdk-driver"
QAT_KERNEL_VF_DRIVERS: Final = "kernel-vf-drivers"
QAT_MAX_NUM_DEVICES: Final = "max-num-devices"
QAT_MODE: Final = "mode"

SGX_ENCLAVE_LIMIT: Final = "enclave-limit"
SGX_PROVISION_LIMIT: Final = "provision-limit"
SGX_DCAP_INFRA_RESOURCES: Final = "dcap-infra-resources"

# The DRA drivers' shared flag group (dra/cli.py); the operator passes the host paths it mounts.
DRA_CDI_ROOT: Final = "cdi-root"
DRA_REGISTRAR_DIR: Final = "kubelet-registrar-directory-path"
DRA_PLUGINS_DIR: Final = "kubelet-plugins-directory-path"
DRA_HEALTHCHECK_PORT: Final = "healthcheck-port"


def flag(name: str) -> str:
    """The flag as it appears on a command line: ``-name`` (Go style, one dash)."""
    return f"-{name}"
