"""The demo's FPGA region-mode scene.

The combined process serves the node's FPGA ports in ``af`` mode (one resource per programmed
function). This scene starts ``intel_fpga_device_plugin -mode region`` next to it, for the same
cards: a container asking for a region gets the ports plus the CDI device whose ``createRuntime``
hook programs the requested function before the container starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from intel_device_plugins.sim.kubelets import DemoKubelet
from intel_device_plugins.sim.process import console_script, plugin_process

REGION_PREFIX = "fpga.intel.com/region-"


def _regions(kubelet: DemoKubelet) -> list[str]:
    return sorted(
        name for name, devices in kubelet.resources().items() if name.startswith(REGION_PREFIX) and devices
    )


async def fpga_region_scene(
    kubelet: DemoKubelet,
    root: Path,
    workdir: Path,
    common_flags: Sequence[str],
    say: Callable[[str], None],
) -> int:
    """Run the region-mode plugin, allocate one region, show what the container gets; exit code."""
    argv = [console_script("intel_fpga_device_plugin"), *common_flags, "-mode", "region", "-node-name", ""]
    started = time.monotonic()
    async with plugin_process(argv, workdir / "plugin-fpga-region.log") as process:
        try:
            await kubelet.wait_for(lambda: bool(_regions(kubelet)), timeout=20)
        except TimeoutError:
            say(f"--- FPGA region-mode plugin log:\n{process.log_text()}")
            return 1
        regions = _regions(kubelet)
        elapsed = time.monotonic() - started
        say(f"\nFPGA plugin in region mode registered {', '.join(regions)} in {elapsed:.2f} s")
        view = await kubelet.run_container(regions[0], 1)
        nodes = ", ".join(container for _, container, _ in view.devices).replace(str(root), "$NODE")
        say(f"  {regions[0]}: devices {nodes}; CDI {', '.join(view.cdi_devices)}")
        for spec in sorted((workdir / "cdi").glob("intel.cdi.k8s.io-fpga-*.yaml")):
            hooks = [
                line.strip() for line in spec.read_text(encoding="utf-8").splitlines() if "path:" in line
            ]
            say(f"  {spec.name}: createRuntime hook {', '.join(hooks)}")
        return await process.terminate()
