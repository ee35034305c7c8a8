"""The memory one NodePrepareResources call with a thousand claims costs, in a process of its own.

A pod may name up to ``MAX_CLAIMS_PER_CALL`` claims; reading them all at once, a TLS connection each,
took a driver from 30 to 340 MiB (``docs/performance.md``, "One NodePrepareResources call with
hundreds of claims"), past the DaemonSet's 128 Mi limit. Here the kubelet service, a real REST client and
the loopback API server run in one fresh interpreter, so its peak RSS covers both ends' connections.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from intel_device_plugins.dra.kubeletservice import MAX_CLAIMS_PER_CALL

GROWTH_BOUND_MIB = 32
"""Far below the DaemonSet's 128 Mi limit less an idle driver's 30 MiB; the old reads grew by 300."""

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from pathlib import Path
    from intel_device_plugins.dra.checkpoint import Checkpoint
    from intel_device_plugins.dra.kubeletservice import KubeletService
    from intel_device_plugins.dra.model import ClaimRef
    from intel_device_plugins.kube.rest import RESOURCE_CLAIMS, RestClient
    from k8stest.fakeclaims import fake_claims_api
    from tests.dra.draclaims import DRIVER, NODE, Profile, claim, result

    def rss_mib(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        raise LookupError(field)

    async def main(root, count):
        uids = [f"{i:08x}-0000-4000-8000-000000000000" for i in range(count)]
        docs = {
            ("ns", f"c{i}"): claim(uid, result(f"card{i % 2}"), name=f"c{i}") for i, uid in enumerate(uids)
        }
        async with fake_claims_api(lambda ns, name: docs.get((ns, name))) as api:
            client = RestClient(api.config)

            async def get_claim(namespace, name):
                return await client.get(RESOURCE_CLAIMS, name, namespace=namespace)

            profile = Profile()
            checkpoint = Checkpoint.for_driver(root / "plugins", DRIVER, sync_appends=False)
            service = KubeletService(profile, profile.scan, get_claim, NODE, checkpoint, root / "cdi")
            # One claim first: the first connection, imports and buffers are not the burst's.
            await service.prepare([ClaimRef("ns", "c0", docs[("ns", "c0")]["metadata"]["uid"])])
            before = rss_mib("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
            refs = [ClaimRef(ns, name, doc["metadata"]["uid"]) for (ns, name), doc in docs.items()]
            outcomes = await service.prepare(refs)
            failed = sum(isinstance(outcome, BaseException) for outcome in outcomes.values())
            peak = rss_mib("VmHWM")
            await client.close()
        print(json.dumps({"before": before, "peak": peak, "failed": failed, "prepared": len(outcomes)}))

    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
    """
)


def test_a_call_with_the_most_claims_grows_the_driver_by_a_few_mib(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(MAX_CLAIMS_PER_CALL)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["failed"] == 0 and figures["prepared"] == MAX_CLAIMS_PER_CALL
    assert figures["peak"] - figures["before"] < GROWTH_BOUND_MIB, figures
