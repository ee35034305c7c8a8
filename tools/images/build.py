#!/usr/bin/env python3
"""Build this project's container images into OCI archives without a Docker daemon or a registry.

    tools/images/build.py            build what is missing, check each image, print a JSON report
    tools/images/build.py --no-check skip the in-image checks

1. Tools: buildah and mmdebstrap come from Debian's packages; missing ones are installed (apt-get).
2. Base image: the Containerfile starts ``FROM debian:bookworm-slim``. When no image of that name is in
   local storage, mmdebstrap builds one from Debian's packages (minbase, without documentation, as the
   slim image is) and it is committed under that very name. Buildah resolves a short name from local
   storage before it would consult any registry, so the unchanged Containerfile builds offline.
3. Targets: each target of the Containerfile is built with ``buildah bud`` and written to
   ``<cache>/<target>-<version>-<key>.oci.tar``. The key hashes every input (Containerfile, lock file,
   package sources, base image, version and revision): a warm run only finds the archives.
4. Checks: every console script of pyproject.toml runs ``--help`` inside the image, as the image's user,
   with every capability dropped; the user must be the one the manifests run it as; the runtime holds no
   compiler, pip or uv, no test infrastructure, no setuid/setgid file and no world-writable file, every
   module of the environment has current bytecode (the images never write any), and the
   operator image no shell and no package manager either. The checks are a Python program run by the
   image's own interpreter (the operator image has no shell to run a script). The outcome is cached next to
   the archive.

Containers run with ``buildah run --isolation chroot``: the image's own root filesystem, user, PATH and
environment, without an OCI runtime, which these sandboxes cannot start (no CAP_SYS_RESOURCE for rlimits).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
CONTAINERFILE: Final = ROOT / "Containerfile"
BASE_IMAGE: Final = "debian:bookworm-slim"
BASE_LABEL: Final = "org.intel-device-plugins.base-key"
DEFAULT_CACHE: Final = Path(
    os.environ.get("IMAGES_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "intel-device-plugins" / "images"
)
#: Default repository prefix of this project's images (no registry host: set one at push time).
DEFAULT_PREFIX: Final = "intel-device-plugins"
#: Containerfile target -> image name (last path segment) and the user the manifests run it as.
TARGETS: Final[dict[str, tuple[str, str]]] = {
    "operator": ("intel-deviceplugin-operator", "65532"),
    "node": ("intel-device-plugins-node", "0"),
}
#: Debian packages providing the tools, installed when missing.
TOOLS: Final[dict[str, str]] = {"buildah": "buildah", "mmdebstrap": "mmdebstrap"}
#: What the slim variant leaves out, as dpkg path filters (documentation, manuals, translations).
SLIM_FILTERS: Final = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
#: Files whose content decides the image (besides src/intel_device_plugins).
CONTEXT_FILES: Final = ("Containerfile", ".containerignore", "pyproject.toml", "uv.lock", "README.md")
#: Programs the runtime stage must not contain.
FORBIDDEN: Final = ("pip", "pip3", "uv", "gcc", "cc", "c++", "make")
#: Targets with a minimal final stage, and what they must not contain besides FORBIDDEN.
MINIMAL_TARGETS: Final = frozenset({"operator"})
MINIMAL_FORBIDDEN: Final = ("sh", "bash", "dash", "apt", "apt-get", "dpkg", "perl", "su", "mount")
#: The environment whose modules must all be compiled to bytecode.
VENV: Final = "/opt/venv"
#: Directories the in-image walk skips: kernel file systems and what the build tool mounts.
WALK_SKIP: Final = ("/proc", "/sys", "/dev", "/run")
#: The in-image check (run by the image's interpreter as the image's user; argv[1] is its JSON input).
#: Prints one finding per line: ``UID n``, ``FAILED what``, ``FORBIDDEN what``, ``SETID path``,
#: ``WORLDWRITABLE path``, ``HOOKBUNDLE bytes``, ``UNCOMPILED path``, ``COMPILED count``.
#: Bytecode: every module of the environment must have a ``.pyc`` the interpreter accepts as current (magic
#: number, and the source's mtime and size, or a hash); the images run with PYTHONDONTWRITEBYTECODE=1, so a
#: missing or stale one is compiled again on every start, and the compiler's memory sets the process's peak.
CHECK_PROGRAM: Final = r"""
import getpass, glob, importlib.util, json, os, shutil, stat, subprocess, sys, tempfile
args = json.loads(sys.argv[1])
print("UID", os.getuid())
compiled = uncompiled = 0
for top, _, files in os.walk(args["venv"]):
    for name in files:
        if not name.endswith(".py"):
            continue
        source = os.path.join(top, name)
        try:
            with open(importlib.util.cache_from_source(source), "rb") as pyc:
                header = pyc.read(16)
        except OSError:
            header = b""
        info = os.stat(source)
        current = len(header) == 16 and header[:4] == importlib.util.MAGIC_NUMBER and (
            int.from_bytes(header[4:8], "little") & 1
            or (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little"))
            == (int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF)
        )
        if current:
            compiled += 1
        else:
            uncompiled += 1
            if uncompiled <= 20:
                print("UNCOMPILED", source)
print("COMPILED", compiled)
for script in args["scripts"]:
    if subprocess.run([script, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        print("FAILED", script)
for program in args["forbidden"]:
    paths = [f"{d}/{program}" for d in ("/bin", "/sbin", "/usr/bin", "/usr/sbin")]
    found = shutil.which(program) or next((p for p in paths if os.path.lexists(p)), None)
    if found:
        print("FORBIDDEN", found)
if importlib.util.find_spec("k8stest") is not None:
    print("FORBIDDEN k8stest")
try:
    getpass.getuser()
except Exception:
    print("FAILED user-without-name")
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in args["skip"]]
    for name in dirs + files:
        path = os.path.join(top, name)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            print("SETID", path)
        if mode & stat.S_IWOTH and not (stat.S_ISDIR(mode) and mode & stat.S_ISVTX):
            print("WORLDWRITABLE", path)
if args["hook"]:
    # The FPGA init container's job: install the self-contained CRI hook, which then runs with an empty
    # environment (as the runtime runs it on the host) and prints its help.
    target = os.path.join(tempfile.mkdtemp(), "fpga-sw")
    installed = subprocess.run(["intel_fpga_hook_install", "--target", target], stdout=subprocess.DEVNULL)
    launcher = [os.path.join(target, "intel-fpga-crihook"), "--help"]
    if installed.returncode or subprocess.run(launcher, env={}, stdout=subprocess.DEVNULL).returncode:
        print("FAILED fpga-hook-bundle")
    else:
        size = 0
        for entry in glob.glob(os.path.join(target, "crihook.*")):
            walked = os.walk(entry) if os.path.isdir(entry) else [("", [], [entry])]
            size += sum(os.lstat(os.path.join(t, f)).st_size for t, _, fs in walked for f in fs)
        print("HOOKBUNDLE", size)
"""
#: Identifies what is checked: a cached result of another check is not reused.
CHECK_VERSION: Final = hashlib.sha256(
    "\0".join([CHECK_PROGRAM, *FORBIDDEN, *MINIMAL_FORBIDDEN, *WALK_SKIP, VENV]).encode()
).hexdigest()[:16]
MERGED_USR_HOOKS: Final = "/usr/share/mmdebstrap/hooks/merged-usr"
HOST_CA_BUNDLE: Final = Path("/etc/ssl/certs/ca-certificates.crt")


class BuildError(RuntimeError):
    pass


def run(cmd: Sequence[str], *, capture: bool = True, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), text=True, capture_output=capture, check=False)
    if check and proc.returncode:
        detail = (proc.stderr or proc.stdout or "").strip()[-2000:] if capture else ""
        raise BuildError(f"{' '.join(cmd[:4])} … failed ({proc.returncode}): {detail}")
    return proc


def log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def ensure_tools(tools: dict[str, str] = TOOLS) -> None:
    """Install the Debian packages of missing tools (apt-get update first), as the k8s build fetches Go."""
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(f"missing {', '.join(missing)}; install with: apt-get install {' '.join(missing)}")
    log(f"installing {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing, "uidmap", "fuse-overlayfs"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def project_version(root: Path = ROOT) -> str:
    with (root / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def console_scripts(root: Path = ROOT) -> tuple[str, ...]:
    """Every console script pyproject.toml declares: each must run in the images."""
    with (root / "pyproject.toml").open("rb") as f:
        return tuple(sorted(tomllib.load(f)["project"]["scripts"]))


def image_ref(target: str, version: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}/{TARGETS[target][0]}:{version}"


def source_files(root: Path = ROOT) -> list[Path]:
    pkg = root / "src" / "intel_device_plugins"
    files = [p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return sorted(files) + [root / f for f in CONTEXT_FILES]


def digest_files(files: Iterable[Path], root: Path, extra: Iterable[str] = ()) -> str:
    """Content key over file names and bytes plus ``extra`` strings (order-independent for files)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()


def revision(root: Path = ROOT) -> str:
    """Last commit that changed an image input, with ``-dirty`` when inputs differ from it."""
    paths = ["src/intel_device_plugins", *CONTEXT_FILES]
    proc = run(["git", "-C", str(root), "log", "-1", "--format=%H", "--", *paths], check=False)
    rev = proc.stdout.strip() or "unknown"
    dirty = run(["git", "-C", str(root), "status", "--porcelain", "--", *paths], check=False).stdout.strip()
    return f"{rev}-dirty" if dirty and rev != "unknown" else rev


def source_label(remote: str) -> str:
    """``org.opencontainers.image.source`` for a git remote: a network URL without credentials, else
    ``unknown``; a local path would make the label (and the image) differ between build machines."""
    remote = remote.strip()
    scheme, sep, rest = remote.partition("://")
    if sep and scheme in ("https", "http", "ssh", "git") and rest:
        authority, slash, path = rest.partition("/")
        return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
    host, colon, path = remote.partition(":")
    if colon and "@" in host and "/" not in host and path:  # scp-like user@host:path
        return remote
    return "unknown"


def source_url(root: Path = ROOT) -> str:
    url = run(["git", "-C", str(root), "config", "--get", "remote.origin.url"], check=False).stdout.strip()
    return source_label(url)


def sources_file() -> Path:
    """The host's Debian sources (deb822 or one-line); mmdebstrap reads the mirror from it."""
    for candidate in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if candidate.is_file():
            return candidate
    raise BuildError("no Debian apt sources found in /etc/apt")


def base_key() -> str:
    recipe = ["bookworm", "minbase", MERGED_USR_HOOKS, *SLIM_FILTERS, sources_file().read_text()]
    return hashlib.sha256("\0".join(recipe).encode()).hexdigest()[:16]


def image_inspect(name: str) -> dict[str, Any] | None:
    proc = run(["buildah", "inspect", "--type", "image", name], check=False)
    if proc.returncode:
        return None
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def ensure_base(cache: Path) -> str:
    """Image ID of ``debian:bookworm-slim`` in local storage, built from Debian's packages when absent."""
    key = base_key()
    found = image_inspect(BASE_IMAGE)
    if found is not None:
        labels = (found.get("OCIv1", {}).get("config") or {}).get("Labels") or {}
        if labels.get(BASE_LABEL) in (None, key):
            return str(found["FromImageID"])  # ours and current, or an image the user brought
        log("base image recipe changed; rebuilding it")
    tar = cache / f"base-bookworm-slim-{key}.tar"
    if not tar.exists():
        log("building the base image from Debian packages (mmdebstrap, about a minute)")
        tmp = tar.with_suffix(".tmp")
        run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--mode=root",
                "--format=tar",
                # merged /usr set up directly (as Debian's own images), not by the usrmerge package and perl
                f"--hook-dir={MERGED_USR_HOOKS}",
                *(f"--dpkgopt={f}" for f in SLIM_FILTERS),
                "bookworm",
                str(tmp),
                str(sources_file()),
            ]
        )
        tmp.rename(tar)
        for stale in cache.glob("base-bookworm-slim-*.tar"):
            if stale != tar:
                stale.unlink()
    ctr = run(["buildah", "from", "scratch"]).stdout.strip()
    try:
        run(["buildah", "add", "--quiet", ctr, str(tar), "/"])
        run(
            [
                "buildah",
                "config",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--cmd",
                "bash",
                "--label",
                f"{BASE_LABEL}={key}",
                ctr,
            ]
        )
        run(["buildah", "commit", "--quiet", "--rm", ctr, BASE_IMAGE])
    except BaseException:
        run(["buildah", "rm", ctr], check=False)
        raise
    info = image_inspect(BASE_IMAGE)
    if info is None:
        raise BuildError(f"{BASE_IMAGE} did not resolve from local storage after the commit")
    return str(info["FromImageID"])


@dataclasses.dataclass(frozen=True)
class Built:
    target: str
    ref: str
    archive: Path
    key: str


def build_target(target: str, cache: Path, base_id: str, version: str, rev: str, src: str) -> Built:
    key = digest_files(source_files(), ROOT, [target, base_id, version, rev, src])[:16]
    ref = image_ref(target, version)
    archive = cache / f"{target}-{version}-{key}.oci.tar"
    labels = {
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": rev,
        "org.opencontainers.image.source": src,
    }
    if archive.exists():
        # The name in local storage may meanwhile point at another clone's build: restore this archive's.
        found = image_inspect(ref)
        if found is None or f"sha256:{found['FromImageID']}" != archive_config_digest(archive):
            run(["buildah", "pull", "--quiet", f"oci-archive:{archive}"])
        if relabel(ref, labels):  # an archive made before labels were checked
            write_archive(ref, archive)
        os.utime(archive)  # the newest archive of a target is the last one built or reused (tests use it)
        return Built(target, ref, archive, key)
    cmd = [
        "buildah",
        "bud",
        "--isolation=chroot",
        "--pull=never",
        "--layers",
        "--target",
        target,
        "--build-arg",
        f"VERSION={version}",
        "--build-arg",
        f"REVISION={rev}",
        "--build-arg",
        f"SOURCE={src}",
        "--tag",
        ref,
        "--file",
        str(CONTAINERFILE),
    ]
    if HOST_CA_BUNDLE.is_file():
        cmd += ["--secret", f"id=ca-bundle,src={HOST_CA_BUNDLE}"]
    log(f"building {ref}")
    run([*cmd, str(ROOT)])
    relabel(ref, labels)
    write_archive(ref, archive)
    prune_archives(cache, target)
    return Built(target, ref, archive, key)


def write_archive(ref: str, archive: Path) -> None:
    """``ref`` from local storage as an OCI archive (replacing it atomically); its check result goes."""
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    run(["buildah", "push", "--quiet", ref, f"oci-archive:{tmp}:{ref}"])
    tmp.rename(archive)
    archive.with_suffix(".check.json").unlink(missing_ok=True)


def relabel(ref: str, wanted: dict[str, str]) -> bool:
    """Set ``wanted`` labels on ``ref`` if the build left others.

    buildah's layer cache can return a LABEL step made with other build arguments: a build of the
    same sources at another revision handed back that revision's label. The labels are checked
    after every build and written again when they differ; returns whether they were.
    """
    info = image_inspect(ref)
    labels = ((info or {}).get("OCIv1", {}).get("config") or {}).get("Labels") or {}
    if all(labels.get(k) == v for k, v in wanted.items()):
        return False
    ctr = run(["buildah", "from", "--pull=never", "--quiet", ref]).stdout.strip()
    try:
        run(["buildah", "config", *(f"--label={k}={v}" for k, v in wanted.items()), ctr])
        run(["buildah", "commit", "--quiet", ctr, ref])
    finally:
        run(["buildah", "rm", ctr], check=False)
    return True


def archive_layers(archive: Path) -> list[tuple[str, int]]:
    """(digest, compressed size) of each layer in an OCI archive, base first."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> bytes:
            f = tar.extractfile("blobs/" + digest.replace(":", "/"))
            if f is None:
                raise BuildError(f"{archive}: missing blob {digest}")
            return f.read()

        index = json.loads(blob_from(tar, "index.json"))
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        return [(layer["digest"], int(layer["size"])) for layer in manifest["layers"]]


def archive_config_digest(archive: Path) -> str:
    """Digest of the image configuration in an OCI archive: the image ID once it is in local storage."""
    with tarfile.open(archive) as tar:
        index = json.loads(blob_from(tar, "index.json"))
        manifest = json.loads(blob_from(tar, "blobs/" + index["manifests"][0]["digest"].replace(":", "/")))
        return str(manifest["config"]["digest"])


def archive_uncompressed_bytes(archive: Path) -> int:
    """Sum of the uncompressed sizes of an OCI archive's layers (what a node's disk holds)."""
    total = 0
    with tarfile.open(archive) as tar:
        index = json.loads(blob_from(tar, "index.json"))
        manifest = json.loads(blob_from(tar, "blobs/" + index["manifests"][0]["digest"].replace(":", "/")))
        for layer in manifest["layers"]:
            f = tar.extractfile("blobs/" + layer["digest"].replace(":", "/"))
            if f is None:
                raise BuildError(f"{archive}: missing layer {layer['digest']}")
            with gzip.GzipFile(fileobj=f) as gz:
                while chunk := gz.read(1 << 20):
                    total += len(chunk)
    return total


def blob_from(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    if f is None:
        raise BuildError(f"{name} missing")
    return f.read()


def check_image(built: Built, scripts: Sequence[str]) -> dict[str, Any]:
    """Run CHECK_PROGRAM inside the image as its configured user, capabilities dropped."""
    info = image_inspect(built.ref)
    if info is None:
        raise BuildError(f"{built.ref} is not in local storage")
    config = info["OCIv1"]["config"]
    expected_user = TARGETS[built.target][1]
    forbidden = FORBIDDEN + (MINIMAL_FORBIDDEN if built.target in MINIMAL_TARGETS else ())
    check_input = {
        "scripts": list(scripts),
        "forbidden": list(forbidden),
        "skip": list(WALK_SKIP),
        "hook": built.target == "node",
        "venv": VENV,
    }
    ctr = run(["buildah", "from", "--pull=never", "--quiet", built.ref]).stdout.strip()
    started = time.monotonic()
    try:
        proc = run(
            [
                "buildah",
                "run",
                "--isolation=chroot",
                "--cap-drop=ALL",
                ctr,
                "--",
                "/opt/venv/bin/python",
                "-c",
                CHECK_PROGRAM,
                json.dumps(check_input),
            ],
            check=False,
        )
    finally:
        run(["buildah", "rm", ctr], check=False)
    findings = parse_findings(proc.stdout)
    layers = archive_layers(built.archive)
    return {
        "target": built.target,
        "ref": built.ref,
        "archive": str(built.archive),
        "key": built.key,
        "check_version": CHECK_VERSION,
        "ok": proc.returncode == 0
        and not any(findings[k] for k in ("FAILED", "FORBIDDEN", "SETID", "WORLDWRITABLE", "UNCOMPILED"))
        and findings["UID"] == [expected_user],
        "output": (proc.stdout + proc.stderr).strip()[-2000:],
        "uid": next(iter(findings["UID"]), ""),
        "expected_uid": expected_user,
        "config_user": str(config.get("User", "")),
        "labels": config.get("Labels") or {},
        "entrypoint": config.get("Entrypoint") or [],
        "scripts": list(scripts),
        "forbidden_checked": list(forbidden),
        "forbidden_found": findings["FORBIDDEN"],
        "setid_files": findings["SETID"],
        "world_writable": findings["WORLDWRITABLE"],
        "layers": layers,
        "compressed_bytes": sum(size for _, size in layers),
        "uncompressed_bytes": archive_uncompressed_bytes(built.archive),
        "uncompiled": findings["UNCOMPILED"],
        "compiled_modules": next((int(n) for n in findings["COMPILED"] if n.isdigit()), 0),
        "fpga_hook_bundle_bytes": next((int(n) for n in findings["HOOKBUNDLE"] if n.isdigit()), None),
        "check_seconds": round(time.monotonic() - started, 2),
    }


FINDINGS: Final = (
    "UID",
    "FAILED",
    "FORBIDDEN",
    "SETID",
    "WORLDWRITABLE",
    "HOOKBUNDLE",
    "UNCOMPILED",
    "COMPILED",
)


def parse_findings(output: str) -> dict[str, list[str]]:
    """CHECK_PROGRAM's lines by kind (``KIND value``); other lines are ignored."""
    found: dict[str, list[str]] = {kind: [] for kind in FINDINGS}
    for line in output.splitlines():
        kind, _, value = line.partition(" ")
        if kind in found:
            found[kind].append(value)
    return found


def _mb(result: dict[str, Any]) -> dict[str, float]:
    return {
        "compressed_mb": result["compressed_bytes"] / 1e6,
        "uncompressed_mb": result["uncompressed_bytes"] / 1e6,
    }


def size_summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Compressed and uncompressed sizes per image, and what the images share (counted once)."""
    layer_sets = {t: {d for d, _ in r["layers"]} for t, r in results.items()}
    sizes = {d: s for r in results.values() for d, s in r["layers"]}
    shared = set.intersection(*layer_sets.values()) if layer_sets else set()
    return {
        "per_image": {t: _mb(r) for t, r in results.items()},
        "shared_layers": len(shared),
        "shared_compressed_mb": sum(sizes[d] for d in shared) / 1e6,
        "all_images_compressed_mb": sum(sizes.values()) / 1e6,
    }


KEEP_ARCHIVES = 3


def prune_archives(cache: Path, target: str, keep: int = KEEP_ARCHIVES) -> list[Path]:
    """Delete all but the ``keep`` newest archives of ``target`` (with their check results): every
    source change makes a new one, and each is tens of megabytes."""
    archives = sorted(cache.glob(f"{target}-*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".check.json").unlink(missing_ok=True)
        removed.append(old)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--no-check", action="store_true", help="skip the in-image checks")
    p.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: every target")
    opts = p.parse_args(argv)
    started = time.monotonic()
    try:
        ensure_tools()
        opts.cache.mkdir(parents=True, exist_ok=True)
        base_id = ensure_base(opts.cache)
        version, rev, src = project_version(), revision(), source_url()
        scripts = console_scripts()
        report: dict[str, Any] = {"version": version, "revision": rev, "images": {}}
        for target in opts.target or list(TARGETS):
            built = build_target(target, opts.cache, base_id, version, rev, src)
            result_file = built.archive.with_suffix(".check.json")
            if opts.no_check:
                report["images"][target] = {"ref": built.ref, "archive": str(built.archive)}
                continue
            cached = json.loads(result_file.read_text()) if result_file.exists() else {}
            if cached.get("check_version") == CHECK_VERSION:
                result = cached
            else:
                result = check_image(built, scripts)
                if result["ok"]:
                    result_file.write_text(json.dumps(result, indent=1))
            report["images"][target] = result
            if not result["ok"]:
                raise BuildError(f"{built.ref} failed its check:\n{result['output']}")
    except BuildError as exc:
        log(str(exc))
        return 1
    if not opts.no_check:
        report["sizes"] = size_summary(report["images"])
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
