"""Tiny OCI image archives written directly, for the real-node tests.

Why write the format by hand: the node tier needs two images (a workload with a shell, and the
sandbox "pause" image containerd starts for every pod), no registry is reachable, and an OCI
archive is only a tar of JSON documents and content-addressed blobs. A few dozen lines build one
from a static busybox in well under a second, reproducibly (fixed timestamps and ownership),
with no image tool and no daemon. ``ctr images import`` reads the result.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Applets the test pods use; each is a symlink to /bin/busybox.
BUSYBOX_APPLETS = (
    "sh", "sleep", "test", "[", "ls", "cat", "stat", "echo", "true", "false", "readlink", "env",
    "mkdir", "grep", "id", "wc", "ip", "hostname", "nc", "seq",
)  # fmt: skip

WORKLOAD_IMAGE = "localhost/k8stest/busybox:1"
PAUSE_IMAGE = "localhost/k8stest/pause:1"


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}


@dataclass(frozen=True)
class ImageSpec:
    """One image: its reference, the command it runs and the files of its single layer."""

    reference: str
    cmd: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)  # path -> content (mode 0755)
    symlinks: Mapping[str, str] = field(default_factory=dict)  # path -> target
    directories: tuple[str, ...] = ("proc", "sys", "dev", "tmp", "etc", "var/run")


def _layer_tar(spec: ImageSpec) -> bytes:
    """An uncompressed layer tar with fixed metadata, so the same input gives the same digest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        parents = {p for path in (*spec.files, *spec.symlinks) for p in _parents(path)}
        for directory in sorted(parents | set(spec.directories)):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for path, content in sorted(spec.files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(content)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(content))
        for path, target in sorted(spec.symlinks.items()):
            info = tarfile.TarInfo(path)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mode = 0o777
            tar.addfile(info)
    return buf.getvalue()


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def image_blobs(spec: ImageSpec, compressed: dict[str, bytes] | None = None) -> tuple[Blob, Blob, Blob]:
    """(layer, config, manifest) for ``spec``; pure. ``compressed`` caches gzip output by the
    uncompressed layer's digest, so images sharing a layer compress it once."""
    raw_layer = _layer_tar(spec)
    diff_id = "sha256:" + hashlib.sha256(raw_layer).hexdigest()
    cache = compressed if compressed is not None else {}
    if diff_id not in cache:
        cache[diff_id] = gzip.compress(raw_layer, compresslevel=1, mtime=0)
    layer = Blob("application/vnd.oci.image.layer.v1.tar+gzip", cache[diff_id])
    config_doc = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": list(spec.cmd), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config = Blob("application/vnd.oci.image.config.v1+json", _json(config_doc))
    manifest_doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config.descriptor(),
        "layers": [layer.descriptor()],
    }
    manifest = Blob("application/vnd.oci.image.manifest.v1+json", _json(manifest_doc))
    return layer, config, manifest


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def write_oci_archive(specs: Sequence[ImageSpec], out: Path) -> Path:
    """Write one OCI archive holding every image of ``specs`` (shared blobs stored once)."""
    blobs: dict[str, Blob] = {}
    compressed: dict[str, bytes] = {}
    manifests = []
    for spec in specs:
        layer, config, manifest = image_blobs(spec, compressed)
        for blob in (layer, config, manifest):
            blobs[blob.digest] = blob
        tag = spec.reference.rsplit(":", 1)[1]
        manifests.append(
            manifest.descriptor(
                platform={"architecture": "amd64", "os": "linux"},
                annotations={
                    # containerd names the imported image after this annotation.
                    "io.containerd.image.name": spec.reference,
                    "org.opencontainers.image.ref.name": tag,
                },
            )
        )
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    entries: list[tuple[str, bytes]] = [
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", _json(index)),
    ]
    entries += [
        (f"blobs/sha256/{digest.split(':', 1)[1]}", blob.data) for digest, blob in sorted(blobs.items())
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def busybox_images(busybox: Path) -> tuple[ImageSpec, ImageSpec]:
    """The workload image (a shell) and the sandbox image (sleeps until killed), one shared layer."""
    files = {"bin/busybox": busybox.read_bytes()}
    links = {f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS}
    workload = ImageSpec(WORKLOAD_IMAGE, ("sh",), files, links)
    # containerd stops a sandbox with SIGKILL, so a plain sleep is a sufficient pause process.
    pause = ImageSpec(PAUSE_IMAGE, ("/bin/sleep", "2147483647"), files, links)
    return workload, pause


def qualified_reference(name: str) -> str:
    """``name`` qualified with ``localhost/`` unless its first component already names a host.

    Why: the CRI normalizes every unqualified reference (``project/image:tag``) to a public
    registry, so an image imported under an unqualified name never matches a pod's image.
    """
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"localhost/{name}"


def localized_index(index: Mapping[str, Any]) -> dict[str, Any]:
    """``index.json`` with every image name qualified (:func:`qualified_reference`); pure."""
    manifests = []
    for manifest in index.get("manifests", []):
        annotations = dict(manifest.get("annotations", {}))
        name = annotations.get("io.containerd.image.name") or annotations.get(
            "org.opencontainers.image.ref.name"
        )
        if name and ("/" in name or ":" in name):
            annotations["io.containerd.image.name"] = qualified_reference(name)
            annotations["org.opencontainers.image.ref.name"] = qualified_reference(name)
        manifests.append({**manifest, "annotations": annotations})
    return {**index, "manifests": manifests}


def localize_archive(source: Path, out: Path) -> Path:
    """A copy of the OCI archive ``source`` whose image names are qualified for import."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            data = src.extractfile(member) if member.isfile() else None
            if member.name.lstrip("./") == "index.json" and data is not None:
                text = _json(localized_index(json.loads(data.read())))
                member.size = len(text)
                dst.addfile(member, io.BytesIO(text))
            else:
                dst.addfile(member, data)
    return out
