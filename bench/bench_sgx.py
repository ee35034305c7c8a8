"""SGX plugin figures on a large node: 1280 enclave and 1280 provision IDs (PODS_PER_CORE 10, 128 CPUs).

Run: ``.venv/bin/python bench/bench_sgx.py`` (about half a minute; prints Markdown).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from plugin_bench import allocation_cost_us, measure_process, report, scan_cost

from intel_device_plugins.plugins.sgx.discovery import SgxLimits
from intel_device_plugins.plugins.sgx.plugin import SgxPlugin
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.process import console_script
from intel_device_plugins.sim.profiles import profile_text

LIMIT = 1280


async def run(workdir: Path) -> str:
    root, plugin_dir = workdir / "node", workdir / "dp"
    build_node(parse_node_spec(profile_text("xeon-accelerators")), root)
    plugin = SgxPlugin(SgxLimits(enclave=LIMIT, provision=LIMIT, dcap_infra=True), prefix=str(root))
    scan = scan_cost(plugin.scan, 300)
    allocation = allocation_cost_us(plugin, "enclave", ["sgx-enclave-7"])
    command = [
        console_script("intel_sgx_device_plugin"),
        "-prefix",
        str(root),
        "-device-plugin-dir",
        str(plugin_dir),
        "-enclave-limit",
        str(LIMIT),
        "-provision-limit",
        str(LIMIT),
        "-dcap-infra-resources",
    ]
    figures = await measure_process(
        command, workdir, plugin_dir, "sgx.intel.com-enclave.sock", "sgx.intel.com/enclave", ["sgx-enclave-7"]
    )
    return report(f"SGX: {LIMIT} enclave + {LIMIT} provision IDs, DCAP resources", scan, figures, allocation)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-sgx-") as workdir:
        print(asyncio.run(run(Path(workdir))))


if __name__ == "__main__":
    main()
