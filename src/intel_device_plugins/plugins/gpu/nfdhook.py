"""``gpu_nfdhook``: node labels describing the GPUs, printed as ``key=value`` lines for NFD.

Label values are limited to 63 characters; long lists are split into ``name``, ``name2``, … with a
``Z`` marking each continuation, so a consumer can join them back.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.gpu.discovery import CARD_NAME
from intel_device_plugins.sysfs import INTEL_VENDOR_ID, is_pf_with_vfs, list_dir, read_int, read_trimmed

LABEL_NAMESPACE = "gpu.intel.com/"
MAX_LABEL_VALUE = 63
CONTINUATION_PREFIX = "Z"
MAX_NUMA_NODE = 32767
MAX_MEMORY = 2**63
DECIMAL = re.compile(r"[0-9]+")


class LabelingError(RuntimeError):
    """The GPUs cannot be described; the message names the card or file."""


def split_at_last_alphanumeric(value: str, limit: int, prefix: str) -> list[str]:
    """Cut ``value`` into chunks of at most ``limit`` characters, each ending in a letter or digit.

    Every chunk after the first starts with ``prefix``. Returns ``[]`` when that is impossible.
    """
    if limit <= len(prefix):
        return []
    chunks: list[str] = []
    rest = value
    first = True
    while rest:
        room = limit if first else limit - len(prefix)
        window = rest[:room]
        if len(rest) > room:
            cut = max((i for i, char in enumerate(window) if _is_label_alphanumeric(char)), default=-1)
            if cut < 0:
                return []
            window = window[: cut + 1]
        chunks.append(window if first else prefix + window)
        rest = rest[len(window) :]
        first = False
    return chunks


def _is_label_alphanumeric(char: str) -> bool:
    """``[A-Za-z0-9]``: where a label value may end (``str.isalnum`` also accepts e.g. ``é``)."""
    return char.isascii() and char.isalnum()


def _split_label(name: str, value: str) -> dict[str, str]:
    chunks = split_at_last_alphanumeric(value, MAX_LABEL_VALUE, CONTINUATION_PREFIX)
    return {LABEL_NAMESPACE + (name if i == 0 else f"{name}{i + 1}"): chunk for i, chunk in enumerate(chunks)}


@dataclass(frozen=True)
class _LabelCard:
    name: str
    number: int
    tiles: int
    memory: int
    numa_node: int | None
    resolved: Path


def _tiles(card_dir: Path) -> int:
    count = len(list(card_dir.glob("gt/gt*"))) + len(list((card_dir / "device").glob("tile?")))
    return count or 1


def _memory(card_dir: Path, tiles: int, env: Mapping[str, str]) -> int:
    total = read_int(card_dir / "lmem_total_bytes")
    if total is None:
        return _env_int(env, "GPU_MEMORY_OVERRIDE")
    return total * tiles - _env_int(env, "GPU_MEMORY_RESERVED")


def _env_int(env: Mapping[str, str], name: str) -> int:
    """A non-negative decimal count from the environment; anything else counts as 0 (as upstream)."""
    value = env.get(name, "")
    return int(value) if DECIMAL.fullmatch(value) else 0


def _numa(card_dir: Path) -> int | None:
    node = read_int(card_dir / "device" / "numa_node")
    if node is None or node < 0 or node > MAX_NUMA_NODE:
        return None
    return node


def _cards(drm_dir: Path, env: Mapping[str, str]) -> list[_LabelCard]:
    entries = list_dir(drm_dir)
    if entries is None:
        raise LabelingError(f"cannot read {drm_dir}")
    cards: list[_LabelCard] = []
    for name in entries:
        if not CARD_NAME.match(name):
            continue
        card_dir = drm_dir / name
        if read_trimmed(card_dir / "device" / "vendor") != INTEL_VENDOR_ID or is_pf_with_vfs(
            card_dir / "device"
        ):
            continue
        if list_dir(card_dir / "device" / "drm") is None:
            raise LabelingError(f"cannot read {card_dir / 'device' / 'drm'}")
        tiles = _tiles(card_dir)
        cards.append(
            _LabelCard(
                name, int(name[4:]), tiles, _memory(card_dir, tiles, env), _numa(card_dir), card_dir.resolve()
            )
        )
    return cards


def _pci_group_key(resolved: Path, level: int) -> str | None:
    """The first ``level`` path components from the first ``pci*`` one; ``None`` if there are fewer."""
    parts = resolved.parts
    start = next((i for i, part in enumerate(parts) if part.startswith("pci")), len(parts))
    if start + level > len(parts):
        return None
    return "/".join(parts[start : start + level])


def gpu_labels(drm_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """All GPU labels for the node whose ``/sys/class/drm`` is ``drm_dir``."""
    cards = _cards(drm_dir, env)
    labels: dict[str, str] = {LABEL_NAMESPACE + "tiles": str(sum(card.tiles for card in cards))}
    if not cards:
        return labels
    # A card whose reservation exceeds its memory is left out, as upstream does.
    memories = [card.memory for card in cards if 0 <= card.memory < MAX_MEMORY]
    if memories:
        labels[LABEL_NAMESPACE + "memory.max"] = str(sum(memories))
    names = ".".join(card.name for card in cards)
    if len(names) > MAX_LABEL_VALUE:
        names = names[: names.rfind(".", 0, MAX_LABEL_VALUE + 1)]
    labels[LABEL_NAMESPACE + "cards"] = names
    labels.update(_split_label("gpu-numbers", ".".join(str(card.number) for card in cards)))
    per_numa: dict[int, list[int]] = {}
    for card in cards:
        if card.numa_node is not None:
            per_numa.setdefault(card.numa_node, []).append(card.number)
    if per_numa:
        value = "_".join(
            f"{node}-{'.'.join(map(str, numbers))}" for node, numbers in sorted(per_numa.items())
        )
        labels.update(_split_label("numa-gpu-map", value))
    labels[LABEL_NAMESPACE + "millicores"] = str(1000 * len(cards))
    level = _env_int(env, "GPU_PCI_GROUPING_LEVEL")
    if level > 0:
        groups: dict[str, list[int]] = {}
        for card in cards:
            key = _pci_group_key(card.resolved, level)
            if key is not None:
                groups.setdefault(key, []).append(card.number)
        # Groups in PCI path order, as upstream, so the label matches on the same hardware.
        value = "_".join(".".join(map(str, groups[key])) for key in sorted(groups))
        if value:
            labels.update(_split_label("pci-groups", value))
    return labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = GoFlagParser(prog="gpu_nfdhook", description="Print Intel GPU node labels for NFD.")
    parser.add_argument(
        "-sysfs", "--sysfs", default="/host-sys", help="sysfs mount point (default /host-sys)"
    )
    args = parser.parse_args(argv)
    drm_dir = Path(args.sysfs) / "class" / "drm"
    try:
        labels = gpu_labels(drm_dir, os.environ)
    except LabelingError as error:
        print(f"gpu_nfdhook: {error}", file=sys.stderr)
        return 1
    for key, value in labels.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
