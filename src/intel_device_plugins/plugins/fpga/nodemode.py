"""The plugin mode a node asks for through its ``fpga.intel.com/device-plugin-mode`` annotation.

:func:`effective_mode` is pure: flag mode plus the node's annotations in, mode and a warning out.
:func:`read_node_annotations` is the thin shell reading the Node object once at start, with the
pod's ServiceAccount (in-cluster), a kubeconfig file, or an API server URL (``-master``), as
upstream's ``-kubeconfig``/``-master`` flags do.
"""

from __future__ import annotations

from collections.abc import Mapping

from intel_device_plugins.plugins.fpga.discovery import Mode

MODE_ANNOTATION = "fpga.intel.com/device-plugin-mode"


def effective_mode(flag_mode: Mode, annotations: Mapping[str, str] | None) -> tuple[Mode, str]:
    """The annotation's mode when it names one, else ``flag_mode``; the text says why, or is empty.

    An annotation naming no mode keeps the flag's mode (upstream exits): a typo on one node must
    not take its FPGAs away.
    """
    value = (annotations or {}).get(MODE_ANNOTATION)
    if value is None:
        return flag_mode, ""
    try:
        mode = Mode(value.strip())
    except ValueError:
        known = ", ".join(mode.value for mode in Mode)
        return flag_mode, (
            f"node annotation {MODE_ANNOTATION}={value!r} names no mode (known: {known}); "
            f"using -mode {flag_mode}"
        )
    if mode is flag_mode:
        return mode, ""
    return mode, f"node annotation {MODE_ANNOTATION}={mode} overrides -mode {flag_mode}"


def read_node_annotations(
    node_name: str, kubeconfig: str = "", master: str = "", timeout: float = 10.0
) -> Mapping[str, str]:
    """The Node's annotations; raises (``OSError``, lightkube's errors) when they cannot be read."""
    import httpx2
    import msgspec
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig, SingleConfig
    from lightkube.resources.core_v1 import Node

    config: KubeConfig | SingleConfig
    if kubeconfig:
        single = KubeConfig.from_file(kubeconfig).get()
        if single is None:
            raise ValueError(f"{kubeconfig}: no current context")
        if master:
            single = single._replace(cluster=msgspec.structs.replace(single.cluster, server=master))
        config = single
    elif master:
        # An API server address alone means no credentials (as with client-go's -master).
        config = KubeConfig.from_dict(
            {
                "clusters": [{"name": "master", "cluster": {"server": master}}],
                "users": [{"name": "anonymous", "user": {}}],
                "contexts": [{"name": "master", "context": {"cluster": "master", "user": "anonymous"}}],
                "current-context": "master",
            }
        )
    else:
        config = KubeConfig.from_service_account()
    client = Client(config=config, timeout=httpx2.Timeout(timeout), trust_env=False)
    try:
        node = client.get(Node, name=node_name)
    finally:
        client.close()
    return dict(node.metadata.annotations or {}) if node.metadata else {}
