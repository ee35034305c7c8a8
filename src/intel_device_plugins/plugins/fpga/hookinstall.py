"""``intel_fpga_hook_install``: put a self-contained ``intel-fpga-crihook`` on the host.

The container runtime runs the FPGA ``createRuntime`` hook on the host, outside any container, so the
hook cannot rely on the host's Python or C library. The FPGA init container runs this installer, which
copies into the host directory (default ``/opt/intel/fpga-sw``):

- ``crihook.<digest>/``: this interpreter, only the standard-library and project modules the hook imports,
  the shared objects the interpreter has mapped (dynamic loader, libc, libm, ...), and
- ``intel-fpga-crihook``: a ``#!/bin/sh`` launcher that starts the bundled Python through the bundled
  loader (``--library-path``), isolated (``-I -S -B``), so the host's libraries and environment never mix in.

What the hook needs is measured, not listed: a probe interpreter imports the hook and reports
``sys.modules`` and the shared objects in ``/proc/self/maps``. The bundle directory is named after a digest
of its content and built in a temporary directory that is renamed into place; the launcher is replaced
with ``os.replace``. Installing the same bundle again changes nothing; bundles the launcher no longer
names are removed. Every path written stays under the target directory.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from intel_device_plugins.flags import GoFlagParser

DEFAULT_TARGET = Path("/opt/intel/fpga-sw")
LAUNCHER_NAME = "intel-fpga-crihook"
BUNDLE_PREFIX = "crihook."
HOOK_MODULE = "intel_device_plugins.plugins.fpga.crihook"
LIB_DIR = PurePosixPath("lib")
STDLIB_DIR = PurePosixPath("lib/python3.11")
DYNLOAD_DIR = STDLIB_DIR / "lib-dynload"
PYTHON_PATH = PurePosixPath("bin/python3.11")

#: Modules the hook imports only while it runs (or that ``-m`` needs), on top of what importing it loads.
EXTRA_MODULES = ("runpy", "locale", "encodings.latin_1", "encodings.ascii")

#: Run by the interpreter being bundled, isolated as the launcher runs it: prints what the hook loads.
_PROBE = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
    module = importlib.import_module(name)
    if hasattr(module, "build_parser"):  # argparse imports more while it formats help and errors
        parser = module.build_parser()
        parser.format_help()
        parser.format_usage()
files = sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})
with open("/proc/self/maps") as maps:
    objects = sorted({line.split()[-1] for line in maps if ".so" in line.rsplit("/", 1)[-1]})
print(json.dumps({"files": files, "objects": objects, "path": [sys.argv[1], *sys.path]}))
"""


class InstallError(Exception):
    """The bundle cannot be made or placed; the message names the path."""


@dataclass(frozen=True)
class BundleFile:
    """One file of the bundle: where it comes from and where it goes, relative to the bundle directory."""

    source: Path
    dest: PurePosixPath
    #: For a shared object's other names (``libz.so.1`` for ``libz.so.1.2.13``): a symbolic link to this
    #: file name in the same directory instead of a copy of ``source``.
    link_to: str = ""


@dataclass(frozen=True)
class InstallResult:
    launcher: Path
    bundle: Path
    changed: bool
    size_bytes: int


def probe(python: Path, package_root: Path, modules: Sequence[str]) -> dict[str, list[str]]:
    """What ``python -I -S`` loads when importing ``modules`` (project modules under ``package_root``)."""
    proc = subprocess.run(
        [str(python), "-I", "-S", "-B", "-c", _PROBE, str(package_root), *modules],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={},
    )
    if proc.returncode:
        raise InstallError(f"probing {python} failed: {proc.stderr.strip()}")
    result: dict[str, list[str]] = json.loads(proc.stdout)
    return result


def _relative_under(path: Path, roots: Sequence[Path]) -> PurePosixPath | None:
    """``path`` relative to the deepest of ``roots`` containing it; None when none does."""
    best: PurePosixPath | None = None
    best_depth = -1
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if len(root.parts) > best_depth:
            best, best_depth = PurePosixPath(rel.as_posix()), len(root.parts)
    return best


def plan_bundle(python: Path, probed: dict[str, list[str]]) -> list[BundleFile]:
    """Pure: the files of a bundle from a probe's answer. Raises when a file would leave the bundle."""
    roots = [Path(p) for p in probed["path"] if p]
    files: dict[PurePosixPath, Path] = {PYTHON_PATH: python}
    for name in probed["files"]:
        source = Path(name)
        rel = _relative_under(source, roots)
        if rel is None:
            raise InstallError(f"{source}: module outside the interpreter's search path")
        parent = Path(source)
        for root in roots:
            if source.is_relative_to(root) and root.name == "lib-dynload":
                parent = root
        dest = (DYNLOAD_DIR if parent.name == "lib-dynload" else STDLIB_DIR) / rel
        files[dest] = source
    # The stdlib landmark that lets the interpreter find its prefix next to itself.
    stdlib = next((r for r in roots if (r / "os.py").is_file()), None)
    if stdlib is None:
        raise InstallError(f"{python}: no standard library (os.py) on its search path")
    files[STDLIB_DIR / "os.py"] = stdlib / "os.py"
    for name in probed["objects"]:
        source = Path(name)
        if source.parent.name == "lib-dynload" or any(source == src for src in files.values()):
            continue
        files[LIB_DIR / source.name] = source
    planned = [BundleFile(src, dest) for dest, src in sorted(files.items())]
    planned += [
        BundleFile(item.source, LIB_DIR / alias, item.dest.name)
        for item in planned
        if item.dest.parent == LIB_DIR
        for alias in library_aliases(item.source)
    ]
    for item in planned:
        check_relative(item.dest)
    return planned


def library_aliases(library: Path) -> list[str]:
    """Other names of ``library`` in its directory (``libz.so.1``): programs ask the loader for these."""
    stem = library.name.split(".so", 1)[0] + ".so"
    aliases = []
    for entry in sorted(library.parent.glob(f"{stem}*")):
        if entry.name != library.name and entry.is_symlink() and entry.resolve() == library.resolve():
            aliases.append(entry.name)
    return aliases


def check_relative(dest: PurePosixPath) -> None:
    """Refuse a destination that is absolute or climbs out of the bundle."""
    if dest.is_absolute() or ".." in dest.parts or not dest.parts:
        raise InstallError(f"{dest}: path leaves the bundle directory")


def loader_name(plan: Sequence[BundleFile]) -> PurePosixPath:
    for item in plan:
        if item.dest.parent == LIB_DIR and item.dest.name.startswith("ld-linux"):
            return item.dest
    raise InstallError("the interpreter maps no dynamic loader (ld-linux*): cannot bundle it")


def digest(plan: Sequence[BundleFile]) -> str:
    h = hashlib.sha256()
    for item in plan:
        h.update(f"{item.dest}\0{item.link_to}\0".encode())
        h.update(b"" if item.link_to else item.source.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def launcher_text(bundle: Path, loader: PurePosixPath) -> str:
    return (
        "#!/bin/sh\n"
        "# intel-fpga-crihook, written by intel_fpga_hook_install: the bundled Python, run through the\n"
        "# bundled dynamic loader and libraries, so the host's Python and C library play no part.\n"
        f"exec '{bundle / loader}' --library-path '{bundle / LIB_DIR}' '{bundle / PYTHON_PATH}'"
        f' -I -S -B -m {HOOK_MODULE} "$@"\n'
    )


def _inside(target: Path, path: Path) -> Path:
    """``path`` if it is directly inside ``target`` and not a symbolic link (which could lead out)."""
    if path.parent != target or path.is_symlink():
        raise InstallError(f"{path}: refusing to write outside {target}")
    return path


def _write_bundle(plan: Sequence[BundleFile], dest_dir: Path) -> None:
    for item in plan:
        out = dest_dir.joinpath(*item.dest.parts)
        if not out.resolve().is_relative_to(dest_dir.resolve()):
            raise InstallError(f"{out}: path leaves the bundle directory")
        out.parent.mkdir(parents=True, exist_ok=True)
        if item.link_to:
            check_relative(PurePosixPath(item.link_to))
            out.symlink_to(item.link_to)  # a name in the same directory: never leads outside
            continue
        shutil.copyfile(item.source, out)
        os.chmod(out, 0o755 if item.dest == PYTHON_PATH or item.dest.parent == LIB_DIR else 0o644)
    # Byte code compiled once, checked by hash only: the launcher runs with -B and never writes.
    compileall.compile_dir(
        dest_dir / STDLIB_DIR,
        quiet=2,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )


def install(
    target: Path,
    *,
    python: Path | None = None,
    package_root: Path | None = None,
    host_target: Path | None = None,
) -> InstallResult:
    """Install (or keep) the bundle and launcher under ``target``.

    ``host_target`` is where ``target`` is on the host, baked into the launcher (default: ``target``, as the
    init container mounts the host directory at the same path).
    """
    if not target.is_absolute() or ".." in target.parts:
        raise InstallError(f"{target}: the target directory must be an absolute path without '..'")
    if target.is_symlink():
        raise InstallError(f"{target}: the target directory is a symbolic link")
    python = (python or Path(sys.executable)).resolve()
    package_root = package_root or Path(__file__).resolve().parents[3]
    host_target = host_target or target
    plan = plan_bundle(python, probe(python, package_root, [HOOK_MODULE, *EXTRA_MODULES]))
    loader = loader_name(plan)
    target.mkdir(parents=True, exist_ok=True)
    bundle = _inside(target, target / f"{BUNDLE_PREFIX}{digest(plan)}")
    changed = False
    if not bundle.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".crihook-", dir=target))
        try:
            _write_bundle(plan, tmp)
            tmp.chmod(0o755)
            tmp.rename(bundle)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        changed = True
    text = launcher_text(host_target / bundle.name, loader)
    launcher = target / LAUNCHER_NAME  # os.replace swaps a symbolic link itself, never its target
    if launcher.is_symlink() or not launcher.is_file() or launcher.read_text() != text:
        fd, tmp_name = tempfile.mkstemp(prefix=".launcher-", dir=target)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp_name, 0o755)
        os.replace(tmp_name, launcher)
        changed = True
    for stale in target.iterdir():
        if stale.name.startswith((BUNDLE_PREFIX, ".crihook-")) and stale != bundle and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
            changed = True
    size = sum(p.lstat().st_size for p in bundle.rglob("*") if p.is_file() and not p.is_symlink())
    return InstallResult(launcher, bundle, changed, size)


def main(argv: Sequence[str] | None = None) -> int:
    parser = GoFlagParser(
        prog="intel_fpga_hook_install",
        description="Install a self-contained intel-fpga-crihook (Python, its libraries, a launcher).",
    )
    parser.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="directory to install into")
    parser.add_argument(
        "--host-target",
        type=Path,
        default=None,
        help="the target directory's path on the host (default: --target)",
    )
    opts = parser.parse_args(argv)
    try:
        result = install(opts.target, host_target=opts.host_target)
    except (InstallError, OSError) as err:
        print(f"intel_fpga_hook_install: {err}", file=sys.stderr)
        return 1
    state = "installed" if result.changed else "already installed"
    print(f"{result.launcher}: {state} ({result.bundle.name}, {result.size_bytes} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
