"""``intel_deviceplugin_operator``: the operator, also serving the pod webhooks of its enabled kinds."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from intel_device_plugins.operator import cli
from intel_device_plugins.webhooks.cli import pod_webhooks


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, pod_webhooks)


if __name__ == "__main__":
    sys.exit(main())
