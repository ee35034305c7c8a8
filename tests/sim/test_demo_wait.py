"""When the demo may print its resource table: after every registered resource's first device list."""

from __future__ import annotations

from intel_device_plugins.sim.demo import first_lists_complete

GPU = ["gpu.intel.com/i915"]
NAMESPACES = ["dsa.intel.com", "qat.intel.com"]
ALL = ["gpu.intel.com/i915", "dsa.intel.com/wq-user-shared", "qat.intel.com/dc", "qat.intel.com/cy"]


def test_registered_but_not_yet_listed_resource_blocks_the_table() -> None:
    # qat.intel.com/cy has registered, but its first ListAndWatch answer has not arrived
    assert not first_lists_complete(ALL, ALL[:3], GPU, NAMESPACES)


def test_all_answered_allows_the_table() -> None:
    assert first_lists_complete(ALL, ALL, GPU, NAMESPACES)


def test_an_empty_first_answer_counts_as_an_answer() -> None:
    assert first_lists_complete(ALL, set(ALL), GPU, NAMESPACES)


def test_expected_resource_or_namespace_missing_blocks_the_table() -> None:
    assert not first_lists_complete(ALL[1:], ALL[1:], GPU, NAMESPACES)
    assert not first_lists_complete(ALL[:2], ALL[:2], GPU, NAMESPACES)
