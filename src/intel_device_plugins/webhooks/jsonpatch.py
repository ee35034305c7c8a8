"""RFC 6902 JSON patches: building one from two documents and applying one (RFC 6901 pointers)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Op = dict[str, Any]


class PatchError(ValueError):
    """A patch operation that does not fit the document (bad path, missing member, index out of range)."""


def escape(token: str) -> str:
    """One RFC 6901 reference token: ``~`` → ``~0``, ``/`` → ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(t)) for t in tokens)


def diff(old: Any, new: Any, path: str = "") -> list[Op]:
    """Operations turning ``old`` into ``new``: members are added, removed or replaced one by one; lists that
    only grew get ``add`` of the new elements, lists of equal length are compared element by element, and
    any other list change replaces the list."""
    if old == new:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        ops: list[Op] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            sub = f"{path}/{escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": sub, "value": copy.deepcopy(value)})
            else:
                ops.extend(diff(old[key], value, sub))
        return ops
    if isinstance(old, list) and isinstance(new, list):
        if len(old) == len(new):
            return [
                op for i, (a, b) in enumerate(zip(old, new, strict=True)) for op in diff(a, b, f"{path}/{i}")
            ]
        if len(new) > len(old) and new[: len(old)] == old:
            return [
                {"op": "add", "path": f"{path}/{i}", "value": copy.deepcopy(new[i])}
                for i in range(len(old), len(new))
            ]
    return [{"op": "replace", "path": path, "value": copy.deepcopy(new)}]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with /")
    tokens = [unescape(t) for t in path[1:].split("/")]
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token, path)
    return node, tokens[-1]


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"{path}: no member {token!r}")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, path, allow_end=False)]
    raise PatchError(f"{path}: {token!r} is below a scalar")


def _index(node: Sequence[Any], token: str, path: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(node)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"{path}: {token!r} is not an array index")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise PatchError(f"{path}: index {index} is out of range")
    return index


def apply(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """A patched copy of ``doc`` (add, remove, replace, test); PatchError when an operation does not fit."""
    out = copy.deepcopy(doc)
    for op in ops:
        path = str(op["path"])
        if path == "":
            if op["op"] in ("add", "replace"):
                out = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"{op['op']} of the whole document")
        parent, token = _parent(out, path)
        kind = op["op"]
        if isinstance(parent, dict):
            if kind == "add":
                parent[token] = copy.deepcopy(op["value"])
            elif kind in ("remove", "replace", "test"):
                if token not in parent:
                    raise PatchError(f"{kind} {path}: no such member")
                if kind == "remove":
                    del parent[token]
                elif kind == "replace":
                    parent[token] = copy.deepcopy(op["value"])
                elif parent[token] != op["value"]:
                    raise PatchError(f"test {path} failed")
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        elif isinstance(parent, list):
            if kind == "add":
                parent.insert(_index(parent, token, path, allow_end=True), copy.deepcopy(op["value"]))
            elif kind == "remove":
                del parent[_index(parent, token, path, allow_end=False)]
            elif kind == "replace":
                parent[_index(parent, token, path, allow_end=False)] = copy.deepcopy(op["value"])
            elif kind == "test":
                if parent[_index(parent, token, path, allow_end=False)] != op["value"]:
                    raise PatchError(f"test {path} failed")
            else:
                raise PatchError(f"unsupported operation {kind!r}")
        else:
            raise PatchError(f"{path}: parent is a scalar")
    return out
