"""What the CDI tests of the real node share: the xe card's spec and pods, the FPGA region's pod,
and waiting for a pod's Warning event."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE
from k8stest.kubeclient import KubeClient, wait_for
from k8stest.node import RealNode, workload_pod
from k8stest.node.plugins import PODS, warning_events

XE = "gpu.intel.com/xe"
GPU_CDI_KIND = "intel.cdi.k8s.io/gpu"
CDI_ONLY_VARIABLE = "K8STEST_CDI_ONLY"
CDI_ONLY_NODE = "/dev/k8stest-cdi-only"
FPGA_PORT = "dfl-port.0"  # the session node's only FPGA port
REGION = f"fpga.intel.com/region-{ARRIA10_INTERFACE}"


def gpu_specs(node: RealNode) -> dict[Path, dict[str, Any]]:
    """The GPU plugin's CDI spec files in the node's /var/run/cdi, parsed."""
    return {
        path: yaml.safe_load(path.read_text())
        for path in sorted(node.layout.cdi_run_dir.glob(f"{GPU_CDI_KIND.replace('/', '-')}-*.yaml"))
    }


def xe_spec(node: RealNode) -> tuple[Path, dict[str, Any]]:
    """The spec file of the xe card: the one whose device node the xe pods got (``card2``)."""
    found = [(path, doc) for path, doc in gpu_specs(node).items() if doc["devices"][0]["name"] == "card2"]
    assert found, f"no CDI spec of card2 in {node.layout.cdi_run_dir}: {sorted(gpu_specs(node))}"
    return found[0]


# Checks the container makes: exactly the xe card's nodes, and its by-path links.
XE_SCRIPT = (
    "set -e; ls -l /dev/dri /dev/dri/by-path; test -c /dev/dri/card2; test -c /dev/dri/renderD130;"
    " test $(ls /dev/dri | grep -c '^card') -eq 1;"
    " for link in /dev/dri/by-path/*-card /dev/dri/by-path/*-render; do test -e $link; done"
)


FPGA_PORT_AFU_ID = f"/sys/bus/platform/devices/{FPGA_PORT}/afu_id"
"""The port's function as the container sees it: its /sys is the node's."""


def region_pod(name: str, node: RealNode, afu: str, script: str = "") -> dict[str, Any]:
    """A pod asking for the region and, as the FPGA webhook would set it, a function to run there;
    its command checks the port's device node, then runs ``script``."""
    pod = workload_pod(
        name,
        node.name,
        f"set -e; ls -l /dev/{FPGA_PORT}; test -c /dev/{FPGA_PORT}; {script or 'true'}",
        limits={REGION: "1"},
    )
    pod["spec"]["containers"][0]["env"] = [
        {"name": "FPGA_REGION_1", "value": ARRIA10_INTERFACE},
        {"name": "FPGA_AFU_1", "value": afu},
    ]
    return pod


def wait_for_warning(client: KubeClient, name: str, needle: str) -> str:
    """The first Warning event of pod ``name`` that contains ``needle``; the failure lists the
    events there are and the pod's container states."""

    def event() -> str | None:
        return next((e for e in warning_events(client, name) if needle in e), None)

    try:
        return wait_for(f"a Warning event of pod {name} naming {needle!r}", event, timeout=60)
    except TimeoutError:
        pod = client.get(f"{PODS}/{name}")
        raise AssertionError(
            f"pod {name}: no Warning event naming {needle!r}; events {warning_events(client, name)},"
            f" containers {pod.get('status', {}).get('containerStatuses')}"
        ) from None


def remove_installed_hook(node: RealNode) -> None:
    """Take the FPGA init container's installation out of the session node's /opt again, so the
    FPGA module that follows sees its own install."""
    shutil.rmtree(node.layout.opt_dir / Path(CRI_HOOK_PATH).parent.relative_to("/opt"), ignore_errors=True)
