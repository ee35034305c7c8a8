"""Run every benchmark in this directory, one after the other, and print the Markdown for
``docs/performance.md``.

Run from the repository root: ``.venv/bin/python bench/run_all.py`` (about ten minutes). Each
benchmark runs as its own process, exactly as its own command line would run it; a benchmark that
fails is reported as such and the others still run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = (
    ("GPU", "bench_gpu.py"),
    ("GPU health", "bench_gpu_health.py"),
    ("QAT", "bench_qat.py"),
    ("DLB", "bench_dlb.py"),
    ("DSA", "bench_dsa.py"),
    ("IAA", "bench_iaa.py"),
    ("SGX", "bench_sgx.py"),
    ("NPU", "bench_npu.py"),
    ("FPGA", "bench_fpga.py"),
    ("FPGA CRI hook and bitstreams", "bench_fpga_hook.py"),
    ("Node footprint: one process against one per kind", "bench_footprint.py"),
    ("DRA: NodePrepareResources", "bench_dra_prepare.py"),
    ("DRA: one NodePrepareResources call with hundreds of claims", "bench_dra_prepare_burst.py"),
)


def main() -> int:
    here = Path(__file__).parent
    failed = 0
    for title, script in BENCHMARKS:
        result = subprocess.run(
            [sys.executable, str(here / script)], stdout=subprocess.PIPE, text=True, check=False
        )
        print(f"## {title}\n")
        if result.returncode == 0:
            print(result.stdout.rstrip())
        else:
            failed += 1
            print(f"`{script}` failed with exit code {result.returncode}; see its standard error.")
        print(flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
