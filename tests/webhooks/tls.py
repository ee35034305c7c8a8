"""A throwaway serving certificate for localhost from the project's CA, and a client context trusting it."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from intel_device_plugins.kube.certs import issue
from intel_device_plugins.kube.https import ServingCert
from intel_device_plugins.kube.selfcerts import write_pair


def serving_cert(directory: Path) -> tuple[ServingCert, ssl.SSLContext]:
    bundle = issue(None, ("localhost",), dt.datetime.now(dt.UTC))
    write_pair(directory, bundle)
    serving = ServingCert(directory)
    assert serving.reload_if_changed()
    return serving, ssl.create_default_context(cadata=bundle.ca_bundle().decode())
