"""FPGA CRI hook and bitstream figures: hook run time (already programmed, simulated PR) and parse
time for 50 MB GBS and AOCX files.

Run from the repository root: ``.venv/bin/python bench/bench_fpga_hook.py`` (about a minute;
prints Markdown).

- **Hook as the runtime runs it**: ``intel_fpga_crihook -prefix <node> -simulate`` as a process with
  the OCI state on stdin, against a simulated DFL node (2 cards, 2 ports each). The floor is the
  same interpreter started with ``-c`` reading stdin: what any Python hook costs before doing
  anything. Hook and floor runs alternate. "Already programmed": one region/AFU pair whose port
  already runs the AFU. "Simulated PR": the port is reset to another AFU before each run, so every
  run reads a 16 MiB GBS, issues the PR ioctl to the simulated FME and verifies the new AFU ID.
- **Hook work in process**: ``crihook.run_hook`` for the same two cases, without interpreter start.
- **Backend choice** (``--backend-choice`` runs only this): what ``SysfsSelectedIoctl`` (the hook's
  default, which looks for the simulation marker in the node's sysfs) adds to each ioctl. On this
  machine's own ``/`` (no FPGA, so no marker, as on hardware), ``DeviceIoctl`` on ``/dev/null``
  (open, ioctl refused with ENOTTY, close) alone and behind the choice, interleaved in blocks. On a
  simulated node, the in-process hook with a simulated PR, through ``SimulatedFme`` directly and
  through the choice.
- **Parse 50 MB**: ``open_bitstream`` on a GBS with a 50 MiB raw part, and on an AOCX whose
  gzip-compressed GBS has a 50 MiB (incompressible) raw part, so the file is about 50 MB. The
  reference for the AOCX is ``zlib`` inflating the same section in one call (the floor for any parser
  that checks the whole stream); for the GBS, reading the file once. Peak Python memory of one parse
  is measured separately with ``tracemalloc``.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from plugin_bench import LoadAverage, header

from intel_device_plugins.plugins.fpga import crihook, fme
from intel_device_plugins.plugins.fpga.bitstream import Aocx, build, open_bitstream, read_raw_bitstream
from intel_device_plugins.sim import fpga as simfpga
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.process import console_script

HOOK_RUNS = 30
PARSE_RUNS = 5
MIB = 1024 * 1024
IFACE = simfpga.ARRIA10_INTERFACE


def median_ms(samples: Sequence[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


def spread_ms(samples: Sequence[float]) -> str:
    ordered = sorted(samples)
    return f"{ordered[0] * 1000:.1f} to {ordered[-1] * 1000:.1f} ms"


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_process(command: Sequence[str], stdin: bytes) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``command`` with ``stdin``."""
    cpu = children_cpu()
    start = time.perf_counter()
    result = subprocess.run(command, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {result.stderr.decode(errors='replace')}")
    return elapsed, children_cpu() - cpu


def hook_node(base: Path) -> tuple[Path, simfpga.SimulatedFpga, bytes, bytes]:
    """A simulated node with a 16 MiB NLB3 bitstream installed; OCI states for the two cases."""
    root = base / "node"
    tree = FakeTree(root)
    card = simfpga.add_fpga(tree, driver=simfpga.DFL, ports=2)
    simfpga.add_fpga(tree, driver=simfpga.DFL, ports=2)
    payload = fme.simulated_payload(simfpga.NLB3_AFU, 16 * MIB)
    build.install_simulated_gbs(root, IFACE, simfpga.NLB3_AFU, payload)
    states = []
    for name, afu in (("programmed", simfpga.NLB0_AFU), ("pr", simfpga.NLB3_AFU)):
        bundle = base / name
        bundle.mkdir()
        port = card.ports[0]
        config = {
            "process": {"env": ["PATH=/bin", f"FPGA_REGION_0={IFACE}", f"FPGA_AFU_0={afu}"]},
            "linux": {"devices": [{"path": f"/dev/{port.name}", "type": "c", "major": 236, "minor": 0}]},
        }
        (bundle / "config.json").write_text(json.dumps(config))
        states.append(json.dumps({"ociVersion": "1.2.0", "id": name, "bundle": str(bundle)}).encode())
    return root, card, states[0], states[1]


def hook_figures(base: Path) -> list[str]:
    root, card, programmed_state, pr_state = hook_node(base)
    tree = FakeTree(root)
    port = card.ports[0].name
    hook = [console_script("intel_fpga_crihook"), "-prefix", str(root), "-simulate"]
    floor = [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]
    samples: dict[str, list[float]] = {"floor": [], "programmed": [], "pr": []}
    cpu: dict[str, list[float]] = {"floor": [], "programmed": [], "pr": []}

    def measure(key: str, command: Sequence[str], state: bytes) -> None:
        wall, used = run_process(command, state)
        samples[key].append(wall)
        cpu[key].append(used)

    for _ in range(HOOK_RUNS):
        measure("floor", floor, programmed_state)
        simfpga.set_afu_id(tree, port, simfpga.NLB0_AFU)
        measure("programmed", hook, programmed_state)
        measure("pr", hook, pr_state)
        assert (tree.path(simfpga.port_sysfs(tree, port)) / "afu_id").read_text().strip() == simfpga.NLB3_AFU
    in_process: dict[str, list[float]] = {"programmed": [], "pr": []}
    simulated = fme.SimulatedFme(root)
    for _ in range(HOOK_RUNS):
        simfpga.set_afu_id(tree, port, simfpga.NLB0_AFU)
        in_process["programmed"].append(timed(lambda: crihook.run_hook(programmed_state, root, simulated)))
        in_process["pr"].append(timed(lambda: crihook.run_hook(pr_state, root, simulated)))
    floor_median = statistics.median(samples["floor"])
    floor_cpu = statistics.median(cpu["floor"])
    rows = [
        "| Case | Wall time, median (range) | vs. floor | CPU per run, median | vs. floor "
        "| Hook work in process |",
        "|---|---|---|---|---|---|",
        f"| floor: `python -c` reading stdin | {median_ms(samples['floor'])} "
        f"({spread_ms(samples['floor'])}) | 1.00x | {median_ms(cpu['floor'])} | 1.00x | n/a |",
    ]
    for key, label in (("programmed", "already programmed"), ("pr", "simulated PR, 16 MiB GBS")):
        ratio = statistics.median(samples[key]) / floor_median
        cpu_ratio = statistics.median(cpu[key]) / floor_cpu
        rows.append(
            f"| {label} | {median_ms(samples[key])} ({spread_ms(samples[key])}) | {ratio:.2f}x | "
            f"{median_ms(cpu[key])} | {cpu_ratio:.2f}x | {median_ms(in_process[key])} |"
        )
    return rows


CHOICE_BLOCKS = 20
CHOICE_CALLS = 2000


def _refused_ioctl(io: fme.FpgaIoctl, node: Path) -> None:
    try:
        io.ioctl(node, fme.REQUESTS[simfpga.DFL].api_version, 0)
    except OSError:
        return
    raise SystemExit(f"an FPGA ioctl on {node} succeeded; the baseline needs one the kernel refuses")


def backend_choice_figures(base: Path) -> list[str]:
    null = Path("/dev/null")
    if fme.is_simulated_device(Path("/"), null.name):
        raise SystemExit("this machine's sysfs marks /dev/null as a simulated FPGA device")
    direct, chosen = fme.DeviceIoctl(), fme.SysfsSelectedIoctl(Path("/"))
    per_call: dict[str, list[float]] = {"direct": [], "chosen": []}
    for _ in range(CHOICE_BLOCKS):
        for key, io in (("direct", direct), ("chosen", chosen)):
            start = time.perf_counter()
            for _ in range(CHOICE_CALLS):
                _refused_ioctl(io, null)
            per_call[key].append((time.perf_counter() - start) / CHOICE_CALLS)
    assert chosen.simulated.calls == []
    root, card, _, pr_state = hook_node(base)
    tree = FakeTree(root)
    port = card.ports[0].name
    afu_id = tree.path(simfpga.port_sysfs(tree, port)) / "afu_id"
    hook: dict[str, list[float]] = {"direct": [], "chosen": []}
    for _ in range(HOOK_RUNS):
        ios: tuple[tuple[str, fme.FpgaIoctl], ...] = (
            ("direct", fme.SimulatedFme(root)),
            ("chosen", fme.SysfsSelectedIoctl(root)),
        )
        for key, hook_io in ios:
            simfpga.set_afu_id(tree, port, simfpga.NLB0_AFU)
            start = time.perf_counter()
            crihook.run_hook(pr_state, root, hook_io)
            hook[key].append(time.perf_counter() - start)
            assert afu_id.read_text().strip() == simfpga.NLB3_AFU

    def micro(samples: Sequence[float]) -> str:
        return f"{statistics.median(samples) * 1e6:.1f} µs"

    extra = statistics.median(per_call["chosen"]) - statistics.median(per_call["direct"])
    return [
        "| Case | Baseline, median | Through `SysfsSelectedIoctl`, median | Difference |",
        "|---|---|---|---|",
        f"| one refused ioctl on `/dev/null`, this machine's `/` ({CHOICE_BLOCKS} blocks of "
        f"{CHOICE_CALLS}, per call) | `DeviceIoctl`: {micro(per_call['direct'])} | "
        f"{micro(per_call['chosen'])} | {extra * 1e6:+.1f} µs |",
        f"| hook in process, simulated PR of a 16 MiB GBS ({HOOK_RUNS} runs each) | `SimulatedFme`: "
        f"{median_ms(hook['direct'])} | {median_ms(hook['chosen'])} | "
        f"{(statistics.median(hook['chosen']) - statistics.median(hook['direct'])) * 1000:+.1f} ms |",
    ]


def parse_figures(base: Path) -> list[str]:
    raw = os.urandom(50 * MIB)
    gbs_path = base / "big.gbs"
    gbs_path.write_bytes(build.gbs_bytes(build.gbs_metadata(IFACE, simfpga.NLB3_AFU), raw))
    opencl = build.gbs_bytes(build.gbs_metadata(IFACE, build.OPENCL_AFU), raw)
    aocx_path = base / "big.aocx"
    aocx_path.write_bytes(build.aocx_bytes(opencl, "0123abcd"))
    del raw, opencl
    parsed = open_bitstream(str(aocx_path))
    assert isinstance(parsed, Aocx)
    with open(aocx_path, "rb") as stream:
        stream.seek(parsed.gz_offset)
        section = stream.read(parsed.gz_size)
    samples: dict[str, list[float]] = {key: [] for key in ("gbs", "gbs-read", "gbs-raw", "aocx", "aocx-zlib")}
    for _ in range(PARSE_RUNS):
        samples["gbs"].append(timed(lambda: open_bitstream(str(gbs_path))))
        samples["gbs-read"].append(timed(gbs_path.read_bytes))
        samples["gbs-raw"].append(timed(lambda: read_raw_bitstream(open_bitstream(str(gbs_path)))))
        samples["aocx"].append(timed(lambda: open_bitstream(str(aocx_path))))
        samples["aocx-zlib"].append(timed(lambda: zlib.decompress(section, 16 + zlib.MAX_WBITS)))
    assert gzip.decompress(section)[:8] == b"XeonFPGA"
    peaks = {}
    for key, path in (("gbs", gbs_path), ("aocx", aocx_path)):
        tracemalloc.start()
        open_bitstream(str(path))
        peaks[key] = tracemalloc.get_traced_memory()[1] / MIB
        tracemalloc.stop()
    sizes = {key: path.stat().st_size / 1e6 for key, path in (("gbs", gbs_path), ("aocx", aocx_path))}
    return [
        "| File | Operation | Median (range) | Peak Python memory |",
        "|---|---|---|---|",
        f"| GBS, {sizes['gbs']:.1f} MB | `open_bitstream` (header + metadata) | "
        f"{median_ms(samples['gbs'])} ({spread_ms(samples['gbs'])}) | {peaks['gbs']:.2f} MiB |",
        f"| GBS | reference: read the whole file | {median_ms(samples['gbs-read'])} | n/a |",
        f"| GBS | `read_raw_bitstream` (what PR sends) | {median_ms(samples['gbs-raw'])} | n/a |",
        f"| AOCX, {sizes['aocx']:.1f} MB | `open_bitstream` (ELF, ELF, streamed gunzip, GBS) | "
        f"{median_ms(samples['aocx'])} ({spread_ms(samples['aocx'])}) | {peaks['aocx']:.2f} MiB |",
        "| AOCX | reference: `zlib` inflating the section in one call | "
        f"{median_ms(samples['aocx-zlib'])} | n/a |",
    ]


def main() -> int:
    load = LoadAverage()
    started = time.perf_counter()
    if sys.argv[1:] == ["--backend-choice"]:
        with tempfile.TemporaryDirectory(prefix="bench-fpga-hook-") as directory:
            rows = backend_choice_figures(Path(directory))
        load.sample()
        command = ".venv/bin/python bench/bench_fpga_hook.py --backend-choice"
        print(header(command, load, time.perf_counter() - started))
        print("\n### The hook's FME backend chosen by the node's sysfs\n")
        print("\n".join(rows))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-fpga-hook-") as directory:
        base = Path(directory)
        hook_rows = hook_figures(base)
        load.sample()
        parse_rows = parse_figures(base)
        load.sample()
    print(header(".venv/bin/python bench/bench_fpga_hook.py", load, time.perf_counter() - started))
    print("\n### Hook on a simulated DFL node (2 cards x 2 ports); 50 MB GBS and AOCX\n")
    print(f"Hook run time, {HOOK_RUNS} runs each, alternating with the floor:\n")
    print("\n".join(hook_rows))
    print(f"\nBitstream parsing, {PARSE_RUNS} runs each:\n")
    print("\n".join(parse_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
