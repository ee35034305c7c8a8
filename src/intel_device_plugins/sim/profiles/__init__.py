"""Ready-made simulated node descriptions (TOML), loaded with :func:`profile_text`."""

from __future__ import annotations

from importlib.resources import files


def profile_text(name: str) -> str:
    """The text of the bundled profile ``<name>.toml``."""
    return files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
