"""Reading the versions a Go module file pins (pure).

Why not `go mod edit -json`: the tests that compare pins run without a Go toolchain, and `go mod
tidy` moves a require between a single line and a block, so a line-based lookup is not enough.
"""

from __future__ import annotations

import re

_REQUIRE = re.compile(r"^(?:require\s+)?(\S+)\s+(v\S+)(?:\s+//.*)?$")
_REPLACE = re.compile(r"^replace\s+(\S+)\s+=>\s+(\S+)\s+(v\S+)$")


def effective_versions(go_mod_text: str) -> dict[str, str]:
    """Required module path → ``path@version`` the build uses; a replace wins over the require."""
    required: dict[str, str] = {}
    replaced: dict[str, str] = {}
    in_require_block = False
    for raw in go_mod_text.splitlines():
        line = raw.strip()
        if line == "require (":
            in_require_block = True
        elif line == ")":
            in_require_block = False
        elif match := _REPLACE.match(line):
            replaced[match[1]] = f"{match[2]}@{match[3]}"
        elif (in_require_block or line.startswith("require ")) and (match := _REQUIRE.match(line)):
            required[match[1]] = f"{match[1]}@{match[2]}"
    return {path: replaced.get(path, version) for path, version in required.items()}


def required_version(go_mod_text: str, path: str) -> str:
    """The version of ``path`` the module requires (``v1.37.2``); KeyError names it when absent."""
    version = effective_versions(go_mod_text)[path]
    return version.rpartition("@")[2]
