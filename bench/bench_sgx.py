"""SGX plugin figures: 1280 enclave and 1280 provision IDs (PODS_PER_CORE 10, 128 CPUs), DCAP resources.

Run from the repository root: ``.venv/bin/python bench/bench_sgx.py`` (about a minute; prints
Markdown). What is measured and how: ``bench/plugin_bench.py``.
"""

from __future__ import annotations

from plugin_bench import PluginBench, main

from intel_device_plugins.sim.profiles import profile_text

LIMIT = 1280

BENCH = PluginBench(
    title=f"SGX: {LIMIT} enclave + {LIMIT} provision IDs, DCAP resources",
    script="intel_sgx_device_plugin",
    cli_module="intel_device_plugins.plugins.sgx.cli",
    node=profile_text("xeon-accelerators"),
    flags=("-enclave-limit", str(LIMIT), "-provision-limit", str(LIMIT), "-dcap-infra-resources"),
    resource="sgx.intel.com/enclave",
    ids=("sgx-enclave-7",),
)

if __name__ == "__main__":
    raise SystemExit(main(BENCH))
