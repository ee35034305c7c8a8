"""``gpu_nfdhook``: the node labels for simulated GPU nodes, and the label-splitting rule."""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from intel_device_plugins.plugins.gpu.nfdhook import (
    LabelingError,
    gpu_labels,
    main,
    split_at_last_alphanumeric,
)
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree

L = "gpu.intel.com/"
GIB = 1 << 30
ALNUM = set(string.ascii_letters + string.digits)


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "host", numa_nodes=2)
    fake.mkdir("/sys/class/drm")
    return fake


def labels(tree: FakeTree, env: Mapping[str, str] | None = None) -> dict[str, str]:
    return gpu_labels(tree.path("/sys/class/drm"), env or {})


def sysfs(tree: FakeTree, card: gpu.SimulatedCard) -> str:
    return tree.sysfs_of(card.address)


def joined(chunks: list[str], prefix: str = "Z") -> str:
    return "".join([chunks[0], *(chunk[len(prefix) :] for chunk in chunks[1:])])


def split_label(found: Mapping[str, str], name: str) -> list[str]:
    """The values of ``name``, ``name2``, ``name3``… in order; checks there are no gaps or extras."""
    keys = [key for key in found if key == L + name or key.removeprefix(L + name).isdigit()]
    chunks = [found[L + name]] + [found[f"{L}{name}{n}"] for n in range(2, len(keys) + 1)]
    assert L + name + "1" not in found
    return chunks


# ----- which cards count ----------------------------------------------------------------------


def test_no_cards_gives_only_a_zero_tile_count(tree: FakeTree) -> None:
    assert labels(tree) == {L + "tiles": "0"}


def test_one_plain_card(tree: FakeTree) -> None:
    gpu.add_card(tree, numa_node=1)

    assert labels(tree) == {
        L + "tiles": "1",
        L + "memory.max": "0",
        L + "cards": "card0",
        L + "gpu-numbers": "0",
        L + "numa-gpu-map": "1-0",
        L + "millicores": "1000",
    }


def test_other_vendors_and_pfs_with_vfs_are_not_counted(tree: FakeTree) -> None:
    gpu.build(tree, [{"vfs": 2}, {"vendor": "0x10de"}])  # PF card0, VFs card1+card2, card3 other vendor
    gpu.add_card(tree)  # card4
    tree.remove("/sys/class/drm/card4/device/vendor")

    found = labels(tree)

    assert found[L + "cards"] == "card1.card2"
    assert found[L + "gpu-numbers"] == "1.2"
    assert found[L + "millicores"] == "2000"


def test_unreadable_drm_dir_is_a_labeling_error(tree: FakeTree) -> None:
    tree.remove("/sys/class/drm")

    with pytest.raises(LabelingError, match="drm"):
        labels(tree)


def test_card_without_readable_device_drm_dir_is_a_labeling_error(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.mkdir("/sys/devices/virtual/drm/card0")
    tree.link("/sys/devices/virtual/drm/card0/device", sysfs(tree, card))
    tree.link("/sys/class/drm/card0", "/sys/devices/virtual/drm/card0")
    tree.remove(f"{sysfs(tree, card)}/drm")

    with pytest.raises(LabelingError, match="card0"):
        labels(tree)


# ----- tiles and memory -----------------------------------------------------------------------


def test_tiles_count_i915_gt_dirs_and_xe_tile_dirs(tree: FakeTree) -> None:
    gpu.add_card(tree, driver="i915", tiles=2)
    gpu.add_card(tree, driver="xe", tiles=4)
    gpu.add_card(tree, tiles=0)  # no tile information at all counts as one tile

    assert tree.path("/sys/class/drm/card1/device/tile3/gt3").is_dir()
    assert labels(tree)[L + "tiles"] == "7"


def test_memory_is_local_memory_times_tiles_summed_over_cards(tree: FakeTree) -> None:
    gpu.add_card(tree, tiles=2, memory_bytes=16 * GIB)
    gpu.add_card(tree, memory_bytes=8 * GIB)  # i915: the label reads lmem_total_bytes, as upstream's

    assert labels(tree)[L + "memory.max"] == str(2 * 16 * GIB + 8 * GIB)


def test_reserved_memory_is_taken_from_every_card(tree: FakeTree) -> None:
    gpu.add_card(tree, tiles=2, memory_bytes=16 * GIB)
    gpu.add_card(tree, memory_bytes=8 * GIB)

    found = labels(tree, {"GPU_MEMORY_RESERVED": "1024"})

    assert found[L + "memory.max"] == str(2 * 16 * GIB - 1024 + 8 * GIB - 1024)


def test_override_is_used_for_cards_without_local_memory_only(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=8 * GIB)
    gpu.add_card(tree)  # integrated: no lmem_total_bytes
    unparsable = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, unparsable)}/drm/card2/lmem_total_bytes", "garbage\n")

    found = labels(tree, {"GPU_MEMORY_OVERRIDE": "4096", "GPU_MEMORY_RESERVED": "1"})

    assert found[L + "memory.max"] == str(8 * GIB - 1 + 4096 + 4096)


def test_local_memory_may_be_written_in_hex(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.write("/sys/class/drm/card0/lmem_total_bytes", "0x400000000\n")

    assert labels(tree)[L + "memory.max"] == str(16 * GIB)


def test_card_whose_reservation_exceeds_its_memory_is_left_out_of_the_sum(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=16 * GIB)
    gpu.add_card(tree, memory_bytes=1 * GIB)

    found = labels(tree, {"GPU_MEMORY_RESERVED": str(2 * GIB)})

    assert found[L + "memory.max"] == str(14 * GIB)


def test_no_memory_label_when_every_card_underflows(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=GIB)

    found = labels(tree, {"GPU_MEMORY_RESERVED": str(2 * GIB)})

    assert L + "memory.max" not in found
    assert found[L + "millicores"] == "1000"


@pytest.mark.parametrize("value", ["abc", "-5", "0x10", "1.5", "", " 7", "1_0"])
@pytest.mark.parametrize("variable", ["GPU_MEMORY_RESERVED", "GPU_MEMORY_OVERRIDE"])
def test_memory_variables_that_are_not_decimal_counts_are_ignored(
    tree: FakeTree, variable: str, value: str
) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    gpu.add_card(tree)

    found = labels(tree, {variable: value})

    assert found[L + "memory.max"] == str(GIB)


# ----- card lists -----------------------------------------------------------------------------


def test_cards_and_gpu_numbers_follow_directory_name_order(tree: FakeTree) -> None:
    for _ in range(4):
        gpu.add_card(tree)
    for _ in range(8):
        gpu.add_card(tree)

    found = labels(tree)

    assert found[L + "gpu-numbers"] == "0.1.10.11.2.3.4.5.6.7.8.9"
    # card0.card1.card10.card11.card2 … card7 is 61 characters; ".card8" would pass 63.
    assert found[L + "cards"] == "card0.card1.card10.card11.card2.card3.card4.card5.card6.card7"
    assert L + "cards2" not in found


def test_long_gpu_numbers_continue_in_numbered_labels_with_z(tree: FakeTree) -> None:
    for _ in range(40):
        gpu.add_card(tree)
    full = ".".join(sorted(str(n) for n in range(40)))  # lexical: 0.1.10.11…19.2.20…
    assert len(full) > 63

    found = labels(tree)
    chunks = split_label(found, "gpu-numbers")

    assert len(chunks) == 2
    assert chunks[0] == full[:63].rstrip(".")
    assert chunks[1] == "Z" + full[len(chunks[0]) :]
    assert all(len(chunk) <= 63 for chunk in chunks)
    assert all(chunk[-1] in ALNUM for chunk in chunks)
    assert joined(chunks) == full
    assert found[L + "millicores"] == "40000"
    assert len(found[L + "cards"]) <= 63


def test_many_cards_need_three_gpu_number_labels(tree: FakeTree) -> None:
    for _ in range(60):
        gpu.add_card(tree)
    full = ".".join(sorted(str(n) for n in range(60)))

    chunks = split_label(labels(tree), "gpu-numbers")

    assert len(chunks) == 3
    assert [chunk[0] for chunk in chunks[1:]] == ["Z", "Z"]
    assert joined(chunks) == full
    assert all(len(chunk) <= 63 and chunk[-1] in ALNUM for chunk in chunks)


# ----- NUMA map -------------------------------------------------------------------------------


def test_numa_map_groups_cards_by_node(tree: FakeTree) -> None:
    for node in (1, 0, 1, 0):
        gpu.add_card(tree, numa_node=node)

    assert labels(tree)[L + "numa-gpu-map"] == "0-1.3_1-0.2"


@pytest.mark.parametrize("content", ["-1", "garbage", "40000", "1.5", "2147483648"])
def test_cards_with_unusable_numa_nodes_are_left_out_of_the_map(tree: FakeTree, content: str) -> None:
    card = gpu.add_card(tree)
    gpu.add_card(tree, numa_node=1)
    tree.write(f"{sysfs(tree, card)}/numa_node", content + "\n")

    assert labels(tree)[L + "numa-gpu-map"] == "1-1"


def test_highest_allowed_numa_node(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    tree.write(f"{sysfs(tree, card)}/numa_node", "32767\n")

    assert labels(tree)[L + "numa-gpu-map"] == "32767-0"


def test_no_numa_map_without_numa_information(tree: FakeTree) -> None:
    card = gpu.add_card(tree, numa_node=-1)
    gpu.add_card(tree, numa_node=-1)
    tree.remove(f"{sysfs(tree, card)}/numa_node")

    found = labels(tree)

    assert not any(key.startswith(L + "numa-gpu-map") for key in found)
    assert found[L + "gpu-numbers"] == "0.1"


def test_long_numa_map_is_split(tree: FakeTree) -> None:
    for n in range(30):
        gpu.add_card(tree, numa_node=n % 2)
    even = sorted((str(n) for n in range(0, 30, 2)), key=lambda s: f"card{s}")
    odd = sorted((str(n) for n in range(1, 30, 2)), key=lambda s: f"card{s}")
    full = f"0-{'.'.join(even)}_1-{'.'.join(odd)}"

    chunks = split_label(labels(tree), "numa-gpu-map")

    assert len(chunks) >= 2
    assert joined(chunks) == full
    assert all(len(chunk) <= 63 and chunk[-1] in ALNUM for chunk in chunks)


# ----- PCI groups -----------------------------------------------------------------------------


def bridge(tree: FakeTree, address: str, parent: str | None = None) -> str:
    function = tree.pci_function(
        address,
        vendor="0x8086",
        device="0x4fa0",
        numa_node=0,
        driver="pcieport",
        pci_class="0x060400",
        parent=parent,
    )
    return "/" + str(function.sysfs_dir.relative_to(tree.root))


def two_switches(tree: FakeTree) -> None:
    """Root ports 00:02.0 (cards 0, 1) and 00:01.0 (cards 2, 3), each with a two-port switch.

    card0: pci0000:00/0000:00:02.0/0000:05:00.0/0000:06:01.0/0000:07:00.0/drm/card0
    """
    for port, upstream, bus in (("0000:00:02.0", 5, 6), ("0000:00:01.0", 1, 2)):
        switch = bridge(tree, f"0000:{upstream:02x}:00.0", bridge(tree, port))
        for slot in (1, 2):
            downstream = bridge(tree, f"0000:{bus:02x}:0{slot}.0", switch)
            gpu.add_card(tree, address=f"0000:{bus + slot:02x}:00.0", parent=downstream)


@pytest.mark.parametrize("level", [None, "0", "abc", "-1"])
def test_no_pci_groups_without_a_positive_grouping_level(tree: FakeTree, level: str | None) -> None:
    two_switches(tree)
    env = {} if level is None else {"GPU_PCI_GROUPING_LEVEL": level}

    assert not any(key.startswith(L + "pci-groups") for key in labels(tree, env))


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("1", "0.1.2.3"),  # one root complex
        ("2", "2.3_0.1"),  # per root port, in PCI path order
        ("3", "2.3_0.1"),  # per switch
        ("4", "2_3_0_1"),  # per downstream port
        ("7", "2_3_0_1"),  # down to the card's own directory
    ],
)
def test_pci_groups_by_path_prefix(tree: FakeTree, level: str, expected: str) -> None:
    two_switches(tree)

    assert labels(tree, {"GPU_PCI_GROUPING_LEVEL": level})[L + "pci-groups"] == expected


def test_pci_grouping_deeper_than_the_path_groups_nothing(tree: FakeTree) -> None:
    two_switches(tree)

    found = labels(tree, {"GPU_PCI_GROUPING_LEVEL": "8"})

    assert not any(key.startswith(L + "pci-groups") for key in found)


def test_cards_outside_the_pci_hierarchy_are_not_grouped(tree: FakeTree) -> None:
    gpu.add_card(tree)
    gpu.add_card(tree)
    odd = gpu.add_card(tree)
    tree.mkdir("/sys/devices/virtual/drm/card2")
    tree.link("/sys/devices/virtual/drm/card2/device", sysfs(tree, odd))
    tree.link("/sys/class/drm/card2", "/sys/devices/virtual/drm/card2")

    found = labels(tree, {"GPU_PCI_GROUPING_LEVEL": "1"})

    assert found[L + "pci-groups"] == "0_1"
    assert found[L + "gpu-numbers"] == "0.1.2"


# ----- the command ----------------------------------------------------------------------------


def test_main_prints_key_value_lines(
    tree: FakeTree, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GPU_MEMORY_OVERRIDE", "GPU_PCI_GROUPING_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPU_MEMORY_RESERVED", "100")
    gpu.add_card(tree, memory_bytes=GIB)
    gpu.add_card(tree, numa_node=1, memory_bytes=GIB)

    assert main(["-sysfs", str(tree.path("/sys"))]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(
        [
            f"{L}tiles=2",
            f"{L}memory.max={2 * GIB - 200}",
            f"{L}cards=card0.card1",
            f"{L}gpu-numbers=0.1",
            f"{L}numa-gpu-map=0-0_1-1",
            f"{L}millicores=2000",
        ]
    )


def test_main_reports_an_unreadable_sysfs_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--sysfs", str(tmp_path / "missing")]) == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(tmp_path / "missing") in captured.err


def test_every_label_value_fits(tree: FakeTree) -> None:
    for n in range(70):
        gpu.add_card(tree, numa_node=n % 2, memory_bytes=16 * GIB, tiles=2)

    found = labels(tree, {"GPU_PCI_GROUPING_LEVEL": "1"})

    assert len(found) > 8
    assert all(len(value) <= 63 for value in found.values())
    assert all(key.startswith(L) for key in found)


# ----- split_at_last_alphanumeric -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "limit", "prefix", "expected"),
    [
        ("abc", 63, "Z", ["abc"]),
        ("", 63, "Z", []),
        ("abcdef", 3, "Z", ["abc", "Zde", "Zf"]),
        ("ab.cd.ef", 4, "Z", ["ab.c", "Zd.e", "Zf"]),
        ("1.2.3.4", 4, "", ["1.2", ".3.4"]),
        ("abc", 1, "Z", []),  # no room next to the prefix
        ("abc", 2, "ZZ", []),
        ("a....b", 3, "Z", []),  # a window of dots only
        ("a..", 3, "Z", ["a.."]),  # the last piece is taken whole
    ],
)
def test_split_examples(value: str, limit: int, prefix: str, expected: list[str]) -> None:
    assert split_at_last_alphanumeric(value, limit, prefix) == expected


def test_only_ascii_letters_and_digits_end_a_chunk() -> None:
    # Python's str.isalnum() accepts "é"; a label value may only break after [A-Za-z0-9].
    chunks = split_at_last_alphanumeric("éa" * 40, 63, "Z")

    assert chunks
    assert all(chunk[-1] == "a" for chunk in chunks[:-1])
    assert joined(chunks) == "éa" * 40


LABEL_TEXT = st.text(alphabet="0123456789abcZ._-", min_size=1)


@settings(deadline=None)
@given(
    value=LABEL_TEXT.filter(lambda text: text[-1] in ALNUM),
    limit=st.integers(2, 80),
)
def test_label_chunks_fit_end_alphanumeric_and_join_back(value: str, limit: int) -> None:
    chunks = split_at_last_alphanumeric(value, limit, "Z")

    if not chunks:  # only when some window holds no letter or digit at all
        assert any(run.strip("._-") == "" for run in _runs(value, limit - 1))
        return
    assert all(len(chunk) <= limit for chunk in chunks)
    assert all(chunk[-1] in ALNUM for chunk in chunks)
    assert all(chunk.startswith("Z") for chunk in chunks[1:])
    assert joined(chunks) == value


def _runs(value: str, length: int) -> list[str]:
    return [value[i : i + length] for i in range(max(1, len(value) - length + 1))]


@settings(deadline=None)
@given(value=LABEL_TEXT, limit=st.integers(1, 80), prefix=st.sampled_from(["", "Z", "ZZ"]))
def test_split_is_greedy_and_complete(value: str, limit: int, prefix: str) -> None:
    chunks = split_at_last_alphanumeric(value, limit, prefix)
    room = limit - len(prefix)

    if room <= 0:
        assert chunks == []
        return
    longest_gap = max((len(run) for run in _non_alnum_runs(value)), default=0)
    if longest_gap < room:
        assert chunks, "a split exists whenever no gap is as long as a chunk's room"
    if not chunks:
        return
    assert joined(chunks, prefix) == value
    assert all(len(chunk) <= limit for chunk in chunks)
    assert all(chunk[-1] in ALNUM for chunk in chunks[:-1])
    offset = 0
    for index, chunk in enumerate(chunks[:-1]):
        piece = chunk if index == 0 else chunk[len(prefix) :]
        window = limit if index == 0 else room
        offset += len(piece)
        # Nothing alphanumeric was left behind inside the window: the cut was as late as possible.
        skipped = value[offset : offset - len(piece) + window]
        assert not set(skipped) & ALNUM, (chunks, skipped)


def _non_alnum_runs(value: str) -> list[str]:
    runs: list[str] = []
    current = ""
    for char in value:
        if char in ALNUM:
            runs.append(current)
            current = ""
        else:
            current += char
    return [*runs, current]
