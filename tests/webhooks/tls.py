"""A throwaway serving certificate for localhost from the project's CA, and a client context trusting it."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from intel_device_plugins.kube.certs import CertBundle, issue
from intel_device_plugins.kube.https import ServingCert
from intel_device_plugins.kube.selfcerts import write_pair


def serving_cert(directory: Path) -> tuple[ServingCert, ssl.SSLContext]:
    bundle = issue(None, ("localhost",), dt.datetime.now(dt.UTC))
    write_pair(directory, bundle)
    serving = ServingCert(directory)
    assert serving.reload_if_changed()
    return serving, ssl.create_default_context(cadata=bundle.ca_bundle().decode())


def kubelet_volume(directory: Path, bundle: CertBundle, generation: str) -> None:
    """Write ``bundle`` the way the kubelet updates a Secret volume: a new timestamped directory, a
    ``..data_tmp`` symlink to it renamed over ``..data``, ``tls.crt``/``tls.key`` symlinks through ``..data``,
    and the previous directory removed."""
    directory.mkdir(exist_ok=True)
    fresh = directory / f"..{generation}"
    fresh.mkdir()
    (fresh / "tls.crt").write_bytes(bundle.tls_cert)
    (fresh / "tls.key").write_bytes(bundle.tls_key)
    previous = (directory / "..data").readlink() if (directory / "..data").is_symlink() else None
    (directory / "..data_tmp").symlink_to(fresh.name)
    (directory / "..data_tmp").rename(directory / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    if previous is not None:
        for child in (directory / previous).iterdir():
            child.unlink()
        (directory / previous).rmdir()
