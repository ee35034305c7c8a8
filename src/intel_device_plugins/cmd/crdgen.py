"""Write the generated manifests: the eight plugin CRDs, the FPGA mapping CRDs, the webhook configurations.

Run ``python -m intel_device_plugins.cmd.crdgen deploy/crds --webhook-dir deploy/operator/webhook
--standalone-dir deploy/webhooks`` after changing a spec in ``operator/kinds/`` or ``operator/spec.py``,
the status in ``operator/model.py``, or ``webhooks/model.py``; a unit test compares the committed files
with this output, so a stale file fails the build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from intel_device_plugins.operator.crdgen import (
    FPGA_CRD_DIR,
    crd_filename,
    render,
    render_kustomization,
    render_webhooks,
)
from intel_device_plugins.operator.kinds import ALL_KINDS
from intel_device_plugins.webhooks.crds import (
    fpga_crd_filename,
    pod_webhook_entries,
    render_fpga,
    standalone_webhook_files,
)
from intel_device_plugins.webhooks.store import FpgaKind


def expected_files() -> dict[str, str]:
    """File name → content for everything the generator owns in ``deploy/crds``."""
    out = {crd_filename(k): render(k) for k in ALL_KINDS}
    out.update({f"{FPGA_CRD_DIR}/{fpga_crd_filename(k)}": render_fpga(k) for k in FpgaKind})
    out[f"{FPGA_CRD_DIR}/kustomization.yaml"] = render_kustomization([fpga_crd_filename(k) for k in FpgaKind])
    out["kustomization.yaml"] = render_kustomization()
    return out


def expected_webhook_files() -> dict[str, str]:
    """File name → content for the generated part of ``deploy/operator/webhook``."""
    return {"manifests.yaml": render_webhooks(pod_webhook_entries())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outdir", type=Path, help="directory for the CRDs, e.g. deploy/crds")
    parser.add_argument("--webhook-dir", type=Path, help="directory for the webhook configurations")
    parser.add_argument("--standalone-dir", type=Path, help="directory of the standalone pod webhooks")
    args = parser.parse_args(argv)
    targets: list[tuple[Path, dict[str, str]]] = [(args.outdir, expected_files())]
    if args.webhook_dir is not None:
        targets.append((args.webhook_dir, expected_webhook_files()))
    if args.standalone_dir is not None:
        targets.append((args.standalone_dir, standalone_webhook_files()))
    for outdir, files in targets:
        outdir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (outdir / name).parent.mkdir(parents=True, exist_ok=True)
            (outdir / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
