"""Fixtures for the integration tier on genuine Kubernetes code.

The fixtures live in a plugin module so other test folders can reuse them; they are imported
here (not listed in ``pytest_plugins``) because pytest only honours that variable in the
top-level conftest.
"""

from intel_device_plugins.k8stest.pytest_plugin import (  # noqa: F401
    device_manager,
    device_plugin_dir,
    k8s_admin,
    k8s_binaries,
    k8s_control_plane,
    kwok_nodes,
    node_device_manager,
    pytest_configure,
    service_account_kubeconfig,
)
