"""The DRA driver's memory for one NodePrepareResources call naming 1, 256 and 1,024 claims.

Run from the repository root: ``.venv/bin/python bench/bench_dra_prepare_burst.py`` (about a minute;
prints Markdown). ``--claims 1,256,1024`` sets the sizes; ``--idle-seconds S`` how long the driver
idles after the call before its resident memory is read again (default 12: the REST client closes
connections idle for 10 s); ``--baseline-src DIR`` measures every size on another source tree too (a
``src`` directory, e.g. an older commit's ``git archive``), just before this tree's, in the same run.

A pod may name hundreds of claims; the kubelet sends all of one driver's claims of a pod in one call,
and the driver reads every claim it has not prepared yet from the API server. Here the API server is
``k8stest.fakeclaims`` on loopback (TLS, kept-alive connections, in this process) and the driver is the
framework's :class:`KubeletService` in a process of its own, a fresh one for every size, with the
16-card profile of ``bench_dra_prepare.py`` and a real :class:`RestClient`. For each size: the driver's
RSS when it is ready, its peak (``VmHWM``) and RSS once the call is answered, and RSS after the claims
are unprepared and the driver idled; the connections the API server saw, in total and at most open at
once. The DaemonSets limit the driver to 128 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from intel_device_plugins.deviceplugin.model import CdiDevice, DeviceNode
from intel_device_plugins.dra.checkpoint import Checkpoint, is_volatile
from intel_device_plugins.dra.kubeletservice import KubeletService
from intel_device_plugins.dra.model import AllocatedDevice, Device, Inventory
from intel_device_plugins.dra.profile import default_claim_edits
from intel_device_plugins.kube.rest import RESOURCE_CLAIMS, RestClient, RestConfig
from intel_device_plugins.kubeletapi.rpc import UnixServer

if TYPE_CHECKING:  # the driver process loads neither grpcio nor the fake, as a driver does not
    from plugin_bench import LoadAverage

    from k8stest.fakeclaims import FakeClaimsApi

DRIVER = "gpu.intel.com"
NODE = "bench-node"
CARDS = 16
NAMESPACE = "bench"
MEMORY_LIMIT_MIB = 128
SETTLE_SECONDS = 1.0


def card(index: int) -> Device:
    name = f"card{index}"
    return Device(
        name=name, cdi=CdiDevice("unused/kind", name, (DeviceNode(f"/dev/dri/{name}", f"/dev/dri/{name}"),))
    )


@dataclass(frozen=True)
class BenchProfile:
    """The driver's profile: sixteen cards and the framework's default claim edits."""

    inventory: Inventory
    driver_name: str = DRIVER

    def scan(self) -> Inventory:
        return self.inventory

    def watch_paths(self) -> Sequence[Path]:
        return ()

    def uevent_subsystems(self) -> Collection[str]:
        return ()

    def claim_edits(
        self, claim_uid: str, allocated: Sequence[tuple[AllocatedDevice, Device]]
    ) -> Sequence[CdiDevice]:
        return default_claim_edits(self.driver_name, claim_uid, allocated)


def claim_document(name: str) -> dict[str, Any]:
    """The claim named ``c-<uid>-<card>``, allocated that card."""
    uid, index = name.removeprefix("c-").rsplit("-", 1)
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": f"card{index}"}
    return {
        "metadata": {"namespace": NAMESPACE, "name": name, "uid": uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


async def serve(workdir: Path, cdi_dir: Path) -> None:
    """The driver process: KubeletService reading claims through a RestClient, on a unix socket."""
    settings = json.loads((workdir / "api.json").read_text())
    client = RestClient(RestConfig(**settings))
    profile = BenchProfile(Inventory(devices=tuple(card(i) for i in range(CARDS))))

    async def get_claim(namespace: str, name: str) -> dict[str, Any]:
        return await client.get(RESOURCE_CLAIMS, name, namespace=namespace)

    service = KubeletService(
        profile,
        profile.scan,
        get_claim,
        NODE,
        Checkpoint.for_driver(workdir / "plugins", DRIVER, sync_appends=not is_volatile(cdi_dir)),
        cdi_dir,
    )
    server = UnixServer(workdir / "dra.sock", service.handlers())
    await server.start()
    await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def driver_process(
    workdir: Path, cdi_dir: Path, driver_src: Path | None
) -> AsyncIterator[asyncio.subprocess.Process]:
    env = dict(os.environ)
    if driver_src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(driver_src), env.get("PYTHONPATH", "")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__)),
        "--serve",
        str(workdir),
        "--cdi-dir",
        str(cdi_dir),
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not (workdir / "dra.sock").exists():
            if time.monotonic() > deadline or process.returncode is not None:
                raise RuntimeError("the driver process did not start")
            await asyncio.sleep(0.02)
        yield process
    finally:
        process.terminate()
        await process.wait()


@dataclass(frozen=True)
class Burst:
    tree: str
    claims: int
    seconds: float
    ready_mib: float
    peak_mib: float
    answered_mib: float
    idle_mib: float
    connections: int
    peak_open: int


def _claims(count: int) -> list[Any]:
    from k8stest.kubeletapi import dra_v1_pb2 as pb

    return [
        pb.Claim(namespace=NAMESPACE, name=f"c-{uid}-{index % CARDS}", uid=uid)
        for index in range(count)
        for uid in [f"{index:08x}-0000-4000-8000-000000000000"]
    ]


async def burst(
    api: FakeClaimsApi, root: Path, cdi_parent: Path, count: int, idle_s: float, driver_src: Path | None
) -> Burst:
    """One fresh driver process, one call with ``count`` claims, then unprepare and idle."""
    import grpc.aio
    from plugin_bench import peak_rss_mib, rss_mib

    from k8stest.kubeletapi import dra_v1_pb2 as pb
    from k8stest.kubeletapi import dra_v1_pb2_grpc as pb_grpc

    workdir = Path(tempfile.mkdtemp(prefix="draburst", dir=root))
    cdi_dir = Path(tempfile.mkdtemp(prefix="draburst-cdi", dir=cdi_parent))
    assert api.config is not None
    settings = {key: getattr(api.config, key) for key in ("host", "port", "ca_pem", "token")}
    (workdir / "api.json").write_text(json.dumps(settings))
    try:
        async with (
            driver_process(workdir, cdi_dir, driver_src) as process,
            grpc.aio.insecure_channel(f"unix:{workdir / 'dra.sock'}") as channel,
        ):
            await asyncio.sleep(SETTLE_SECONDS)
            pid = process.pid
            ready = rss_mib(pid)
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak from here on, not the start's
            before = (api.counters.connections, api.counters.requests)
            api.counters.peak_open = api.counters.open
            stub: pb_grpc.DRAPluginAsyncStub = pb_grpc.DRAPluginStub(channel)
            claims = _claims(count)
            started = time.perf_counter()
            response = await stub.NodePrepareResources(
                pb.NodePrepareResourcesRequest(claims=claims), timeout=300
            )
            seconds = time.perf_counter() - started
            if process.returncode is not None:
                raise RuntimeError(f"the driver died during the call (exit {process.returncode})")
            answered, peak = rss_mib(pid), peak_rss_mib(pid)
            errors = [entry.error for entry in response.claims.values() if entry.error]
            if len(response.claims) != count or errors:
                raise RuntimeError(f"{len(errors)} of {count} claims failed: {errors[:1]}")
            if api.counters.requests - before[1] != count:
                raise RuntimeError(f"{api.counters.requests - before[1]} reads for {count} claims")
            await stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=claims), timeout=300)
            if any(cdi_dir.iterdir()):
                raise RuntimeError("CDI specs left after unprepare")
            await asyncio.sleep(idle_s)
            return Burst(
                tree="baseline" if driver_src is not None else "this tree",
                claims=count,
                seconds=seconds,
                ready_mib=ready,
                peak_mib=peak,
                answered_mib=answered,
                idle_mib=rss_mib(pid),
                connections=api.counters.connections - before[0],
                peak_open=api.counters.peak_open,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(cdi_dir, ignore_errors=True)


def _source(namespace: str, name: str) -> dict[str, Any] | None:
    return claim_document(name) if namespace == NAMESPACE and name.startswith("c-") else None


async def measure(
    sizes: Sequence[int], idle_s: float, baseline: Path | None, root: Path, cdi_parent: Path
) -> list[Burst]:
    """Every size on this tree, and first on the baseline's when there is one, taking turns."""
    from k8stest.fakeclaims import fake_claims_api

    async with fake_claims_api(_source) as api:
        trees: list[Path | None] = [baseline, None] if baseline is not None else [None]
        return [await burst(api, root, cdi_parent, count, idle_s, tree) for count in sizes for tree in trees]


def report(results: Sequence[Burst], argv: Sequence[str], seconds: float, load: LoadAverage) -> str:
    command = " ".join([".venv/bin/python bench/bench_dra_prepare_burst.py", *argv])
    lines = [
        f"Command: `{command}` — run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; 1-minute load average {load.text()}.",
        "",
        "| driver | claims in the call | call | RSS ready | peak (VmHWM) | RSS answered "
        "| RSS after unprepare, idle | connections opened / most open at once |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        over = " (over the limit)" if r.peak_mib > MEMORY_LIMIT_MIB else ""
        lines.append(
            f"| {r.tree} | {r.claims} | {r.seconds * 1000:.0f} ms | {r.ready_mib:.1f} MiB "
            f"| {r.peak_mib:.1f} MiB{over} | {r.answered_mib:.1f} MiB | {r.idle_mib:.1f} MiB "
            f"| {r.connections} / {r.peak_open} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, argv: Sequence[str]) -> str:
    sizes = [int(size) for size in args.claims.split(",")]
    root = Path(tempfile.mkdtemp(prefix="draburst", dir="/tmp"))
    shm = Path("/dev/shm")
    cdi_parent = shm if shm.is_dir() else root
    from plugin_bench import LoadAverage

    load = LoadAverage()
    started = time.monotonic()
    try:
        results = await measure(sizes, args.idle_seconds, args.baseline_src, root, cdi_parent)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load.sample()
    return report(results, argv, time.monotonic() - started, load)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--claims", default="1,256,1024", help="claims per call, comma-separated")
    parser.add_argument("--idle-seconds", type=float, default=12.0, help="idle time before the last RSS")
    parser.add_argument(
        "--baseline-src", type=Path, default=None, help="a source tree to measure too, size by size"
    )
    parser.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cdi-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args.serve, args.cdi_dir))
        return 0
    print(asyncio.run(main_async(args, list(argv if argv is not None else sys.argv[1:]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
