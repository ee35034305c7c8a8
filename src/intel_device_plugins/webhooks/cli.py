"""``intel_fpga_admissionwebhook`` and ``intel_sgx_admissionwebhook``: the pod webhooks on their own.

Same HTTPS server, TLS settings, server limits and certificate modes as the operator (cert-manager files, or
self-managed: issued, rotated and injected by the process itself). Flags keep upstream's names and accept
one or two leading dashes. ``--leader-elect`` is accepted for compatibility and changes nothing: every
replica serves admission and must know the mappings, so there is nothing for a leader to do alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence

from lightkube import AsyncClient

from intel_device_plugins.flags import GoFlagParser, parse_bool
from intel_device_plugins.kube.https import ReviewHandler
from intel_device_plugins.kube.metrics import Metrics
from intel_device_plugins.kube.serving import add_webhook_flags, install_signal_handlers, serve_admission
from intel_device_plugins.logconfig import add_verbosity_flag, configure_logging
from intel_device_plugins.webhooks.classsync import ClassSync
from intel_device_plugins.webhooks.handlers import FPGA_PATH, SGX_PATH, fpga_review, sgx_review
from intel_device_plugins.webhooks.store import MappingStore
from intel_device_plugins.webhooks.watch import follow_all

log = logging.getLogger("intel_admissionwebhook")


FPGA_PROGRAM = "intel_fpga_admissionwebhook"


def parser(prog: str) -> argparse.ArgumentParser:
    p = GoFlagParser(prog=prog, description="Mutating admission webhook for pods.")
    if prog == FPGA_PROGRAM:
        p.add_bool_flag(
            "manage-deviceclasses",
            help="keep the FPGA DRA driver's DeviceClasses in step with the AcceleratorFunctions and "
            "FpgaRegions (creates, updates and deletes only classes it labels as its own)",
        )
    add_webhook_flags(p)
    p.add_argument("--metrics-bind-address", default="0", help="metrics address; 0 (default) disables")
    p.add_argument("--health-probe-bind-address", default=":8081", help="/healthz and /readyz address")
    p.add_argument(
        "--leader-elect",
        nargs="?",
        const=True,
        default=False,
        type=parse_bool,
        help="accepted for compatibility; every replica serves",
    )
    add_verbosity_flag(p)
    return p


async def serve(
    opts: argparse.Namespace,
    env: Mapping[str, str],
    routes: Callable[[AsyncClient | None], tuple[dict[str, ReviewHandler], list[asyncio.Task[None]]]],
    needs_client: bool,
    ready_extra: Callable[[], bool] = lambda: True,
) -> int:
    """Run the webhook server (and health/metrics) until cancelled."""
    self_managed = opts.webhook_cert_mode == "self-managed"
    client = AsyncClient() if (needs_client or self_managed) else None
    paths, background = routes(client)
    namespace = env.get("POD_NAMESPACE") or "default"
    try:
        async with serve_admission(opts, client, namespace, Metrics(), paths, ready=ready_extra) as serving:
            await serving.webhooks  # a webhook server that cannot listen ends the process
            log.info("serving %s", ", ".join(paths))
            await asyncio.Event().wait()
            return 0
    finally:
        for t in background:
            t.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()


def pod_webhooks(
    client: AsyncClient | None, which: Collection[str], store: MappingStore | None = None
) -> tuple[dict[str, ReviewHandler], list[asyncio.Task[None]]]:
    """Routes of the ``fpga`` and ``sgx`` pod webhooks named in ``which``, and the tasks they need.

    The FPGA webhook follows the mappings into ``store`` (a fresh one unless given) through ``client``.
    """
    routes: dict[str, ReviewHandler] = {}
    tasks: list[asyncio.Task[None]] = []
    if "fpga" in which:
        assert client is not None
        store = store if store is not None else MappingStore()
        routes[FPGA_PATH] = fpga_review(store)
        tasks.append(asyncio.create_task(follow_all(client, store)))
    if "sgx" in which:
        routes[SGX_PATH] = sgx_review
    return routes, tasks


def _run(prog: str, argv: Sequence[str] | None, which: str) -> int:
    p = parser(prog)
    opts = p.parse_args(argv)
    configure_logging(opts.verbosity)
    manage_classes = bool(getattr(opts, "manage_deviceclasses", False))
    changes = asyncio.Event()
    store = MappingStore(on_change=changes.set if manage_classes else None)

    def routes(client: AsyncClient | None) -> tuple[dict[str, ReviewHandler], list[asyncio.Task[None]]]:
        paths, tasks = pod_webhooks(client, {which}, store)
        if manage_classes:
            assert client is not None
            tasks.append(asyncio.create_task(ClassSync(client, store, changes).run()))
        return paths, tasks

    async def runner() -> int:
        task = asyncio.current_task()
        assert task is not None
        install_signal_handlers(task)
        try:
            if which == "fpga":
                return await serve(opts, dict(os.environ), routes, True, lambda: store.synced)
            return await serve(opts, dict(os.environ), routes, False)
        except asyncio.CancelledError:
            return 0

    return asyncio.run(runner())


def fpga_main(argv: Sequence[str] | None = None) -> int:
    return _run(FPGA_PROGRAM, argv, "fpga")


def sgx_main(argv: Sequence[str] | None = None) -> int:
    return _run("intel_sgx_admissionwebhook", argv, "sgx")
