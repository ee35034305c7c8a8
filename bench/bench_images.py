"""Image build times and sizes: a cold and a warm ``make images`` in one run, sizes against the 120 MB budget.

    .venv/bin/python bench/bench_images.py           # warm run only (the cache as it is), then sizes
    .venv/bin/python bench/bench_images.py --cold    # first removes this project's images, the base image
                                                     # and the archive cache, then runs cold, then warm
    .venv/bin/python bench/bench_images.py --baseline ARCHIVE...   # also the sizes of earlier archives
                                                     # (say, another revision's), in the same document

Cold means: no archives, no base image, no buildah layer cache for these images; Debian and PyPI downloads
still pass through whatever caches the network has. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "tools" / "images" / "build.py"
BUDGET_MB = 120.0


def _timed_build() -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(BUILD)], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode:
        raise SystemExit(f"build failed:\n{proc.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(proc.stdout)
    return elapsed, report


def _forget_everything(cache: Path) -> None:
    """Remove this project's images, the local base image and dangling layers, and the archive cache."""
    names = subprocess.run(
        ["buildah", "images", "--format", "{{.Name}}:{{.Tag}}", "--noheading"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ours = [n for n in names if "intel-device-plugins" in n or n.endswith("/debian:bookworm-slim")]
    subprocess.run(["buildah", "rm", "--all"], capture_output=True, check=False)
    if ours:
        subprocess.run(["buildah", "rmi", "--force", *ours], capture_output=True, check=False)
    subprocess.run(["buildah", "rmi", "--prune"], capture_output=True, check=False)
    shutil.rmtree(cache, ignore_errors=True)


def _archive_sizes(archive: Path) -> dict[str, float]:
    """Layer count, compressed and uncompressed MB of one OCI archive, as build.py's report counts them."""
    spec = importlib.util.spec_from_file_location("images_build", BUILD)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # dataclasses look their module up there
    spec.loader.exec_module(build)
    layers = build.archive_layers(archive)
    return {
        "layers": len(layers),
        "compressed_mb": sum(size for _, size in layers) / 1e6,
        "uncompressed_mb": build.archive_uncompressed_bytes(archive) / 1e6,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--cold", action="store_true", help="start from nothing (removes this project's images)")
    p.add_argument("--baseline", nargs="*", type=Path, default=[], help="OCI archives to size for comparison")
    opts = p.parse_args()
    cache = Path(
        os.environ.get("IMAGES_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "intel-device-plugins" / "images"
    )
    out: dict[str, Any] = {"load_average_before": os.getloadavg()}
    if opts.cold:
        _forget_everything(cache)
        out["cold_seconds"], _ = _timed_build()
    out["warm_seconds"], report = _timed_build()
    sizes = report["sizes"]
    out["sizes"] = sizes
    out["budget_mb"] = BUDGET_MB
    out["within_budget"] = sizes["all_images_compressed_mb"] < BUDGET_MB
    out["baseline"] = {str(a): _archive_sizes(a) for a in opts.baseline}
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
