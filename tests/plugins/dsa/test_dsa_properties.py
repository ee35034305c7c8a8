"""Properties of work-queue discovery over generated queue configurations."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.plugins.idxd.discovery import DSA, scan_work_queues
from intel_device_plugins.sim import idxd
from intel_device_plugins.sim.fakefs import FakeTree

QUEUE = st.tuples(
    st.sampled_from(["user", "kernel"]),
    st.sampled_from(["dedicated", "shared"]),
    st.sampled_from(["enabled", "disabled"]),
)
RESOURCE_TYPE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@settings(max_examples=15, deadline=None)
@given(
    devices=st.lists(st.lists(QUEUE, min_size=1, max_size=8), min_size=1, max_size=3), share=st.integers(1, 5)
)
def test_ids_follow_the_queue_configuration(devices: list[list[tuple[str, str, str]]], share: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        tree = FakeTree(Path(root))
        for queues in devices:
            accelerator = idxd.add_accelerator(tree, "dsa")
            for number, (wq_type, mode, state) in enumerate(queues):
                idxd.add_work_queue(tree, accelerator, "dsa", number, wq_type=wq_type, mode=mode, state=state)
        discovery = scan_work_queues(root, DSA, shared_dev_num=share)
    expected = sum(
        share if mode == "shared" else 1
        for queues in devices
        for (_t, mode, state) in queues
        if state == "enabled"
    )
    ids = [device_id for devices_map in discovery.tree.values() for device_id in devices_map]
    assert len(ids) == expected
    assert discovery.problems == ()
    for resource, devices_map in discovery.tree.items():
        assert RESOURCE_TYPE.match(resource)
        for device_id, info in devices_map.items():
            assert device_id.startswith(resource + "-wq") and len(device_id) <= 63
            assert info.health is Health.HEALTHY
            assert bool(info.nodes) == resource.startswith("wq-user-")
