"""The one worker loop: reconcile, report failures, retry with back-off, look again when asked."""

from __future__ import annotations

import asyncio

from intel_device_plugins.kube.workqueue import WorkQueue, run_worker


async def test_worker_reconciles_retries_and_hands_the_next_look_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    attempts: dict[str, int] = {}
    errors: list[str] = []
    later: list[tuple[str, float | None]] = []

    async def reconcile(key: str) -> float | None:
        attempts[key] = attempts.get(key, 0) + 1
        if key == "flaky" and attempts[key] == 1:
            raise ConnectionError("api server restarting")
        return 30.0 if key == "periodic" else None

    worker = asyncio.create_task(
        run_worker(queue, reconcile, lambda k, e: errors.append(k), lambda k, d: later.append((k, d)))
    )
    for key in ("plain", "periodic", "flaky"):
        queue.add(key)
    for _ in range(100):
        if attempts.get("flaky") == 2:
            break
        await asyncio.sleep(0.05)
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    assert attempts == {"plain": 1, "periodic": 1, "flaky": 2}  # retried after its back-off
    assert errors == ["flaky"]
    assert sorted(later, key=str) == sorted([("plain", None), ("periodic", 30.0), ("flaky", None)], key=str)
