"""Every plugin takes the node's filesystem root the same way: ``prefix``, a string, empty for ``/``.

It is what the ``-prefix`` flag holds; a plugin that needs a ``Path`` derives it.
"""

from __future__ import annotations

import dataclasses

import pytest

from intel_device_plugins.plugins.dlb.plugin import DlbPlugin
from intel_device_plugins.plugins.fpga.plugin import FpgaPlugin
from intel_device_plugins.plugins.gpu.plugin import GpuPlugin
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin, WorkQueuePlugin
from intel_device_plugins.plugins.npu.plugin import NpuPlugin
from intel_device_plugins.plugins.sgx.plugin import SgxPlugin

PLUGINS = (DlbPlugin, DsaVfioPlugin, FpgaPlugin, GpuPlugin, NpuPlugin, SgxPlugin, WorkQueuePlugin)


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda cls: cls.__name__)
def test_the_root_is_the_prefix_string(plugin: type) -> None:
    (prefix,) = (f for f in dataclasses.fields(plugin) if f.name == "prefix")
    assert prefix.init and prefix.type in ("str", str) and prefix.default == ""
    assert not any(f.init and f.name == "root" for f in dataclasses.fields(plugin))
