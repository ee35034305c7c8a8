"""The standalone FPGA pod webhook installed onto a real node, as a user installs it.

``deploy/webhooks/fpga/self-signed`` with the opt-in ``deploy/webhooks/fpga/deviceclasses`` component
(the webhook keeps the FPGA DRA driver's DeviceClasses in step with the AcceleratorFunctions and
FpgaRegions), the operator image from ``make images`` named through kustomize ``images:`` entries.
Its pod runs under the node's kubelet and the API server calls it through its Service, so a pod
created in the cluster is mutated exactly as in production.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from intel_device_plugins.operator.images import OPERATOR_IMAGE_NAME, image
from k8stest.binaries import repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for
from k8stest.node.operator import images_kustomization
from k8stest.node.plugins import image_archive
from k8stest.node.running import RealNode
from k8stest.ociimage import qualified_reference
from k8stest.operatorinstall import Kubectl

__all__ = ["WEBHOOK_NAMESPACE", "FpgaWebhook", "install_fpga_webhook"]

WEBHOOK_NAMESPACE = "intelfpgawebhook-system"
LABELS = "app.kubernetes.io/name=intel-fpga-admissionwebhook"
MANAGED_CLASSES = "app.kubernetes.io/managed-by=intel-fpga-admissionwebhook"


@dataclass
class FpgaWebhook:
    kubectl: Kubectl
    overlay: Path

    def log(self) -> str:
        out = self.kubectl(
            "logs", "-n", WEBHOOK_NAMESPACE, "-l", LABELS, "--tail=80", "--all-containers", check=False
        )
        return out.stdout + out.stderr

    def uninstall(self, timeout: float = 180) -> None:
        """Delete the install (CRDs included) and the classes the webhook made; wait until the
        namespace and the CRDs are gone, so a later install does not meet them terminating."""
        self.kubectl("delete", "-k", str(self.overlay), "--ignore-not-found", "--wait=false", check=False)
        for what in (f"namespace/{WEBHOOK_NAMESPACE}", "crd/acceleratorfunctions.fpga.intel.com"):
            self.kubectl(
                "wait", "--for=delete", what, f"--timeout={int(timeout)}s", check=False, timeout=timeout + 20
            )
        self.kubectl("delete", "deviceclasses", "-l", MANAGED_CLASSES, check=False)


def _answers(client: KubeClient) -> bool:
    """A dry-run pod asking for a function no object names: the webhook denies it. A webhook that is
    not reached yet lets it through (failurePolicy Ignore)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fpga-webhook-probe"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "none",
                    "resources": {"limits": {"fpga.intel.com/no-such-function": "1"}},
                }
            ]
        },
    }
    try:
        client.create("/api/v1/namespaces/default/pods?dryRun=All", pod)
    except ApiError as error:
        if "no such resource" in str(error):
            return True
        raise
    return False


def install_fpga_webhook(
    cp: ControlPlane, node: RealNode, workdir: Path, timeout: float = 180
) -> FpgaWebhook:
    """Import the operator image, apply the install and wait until the webhook answers through the
    API server."""
    root = repo_root()
    if root is None:
        raise FileNotFoundError("deploy/ (k8stest runs from a checkout)")
    if not node.serves_egress:
        raise ValueError(
            f"node {node.name} does not carry the API server's traffic into the cluster: the webhook"
            " must run on the control plane's first node"
        )
    if qualified_reference(image(OPERATOR_IMAGE_NAME)) not in set(node.image_names()):
        archive = image_archive("operator")
        if archive is None:
            raise FileNotFoundError("no operator image archive (operator-*.oci.tar): run `make images`")
        node.import_images(archive)
    overlay = workdir / "fpga-webhook"
    overlay.mkdir(parents=True, exist_ok=True)
    fpga = root / "deploy" / "webhooks" / "fpga"
    document = images_kustomization(os.path.relpath(fpga / "self-signed", overlay))
    document["components"] = [os.path.relpath(fpga / "deviceclasses", overlay)]
    # Only this node holds the image and carries the API server's calls: no other real node may get the pod.
    document["patches"] = [
        {
            "target": {"kind": "Deployment"},
            "patch": yaml.safe_dump(
                [
                    {
                        "op": "add",
                        "path": "/spec/template/spec/nodeSelector",
                        "value": {"kubernetes.io/hostname": node.name},
                    }
                ]
            ),
        }
    ]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(document))
    kubectl = Kubectl(cp.binaries.path("kubectl"), cp.admin_kubeconfig)
    kubectl(
        "wait", "--for=delete", f"namespace/{WEBHOOK_NAMESPACE}", "--timeout=180s", check=False, timeout=200
    )
    kubectl("apply", "-k", str(overlay), timeout=180)
    installed = FpgaWebhook(kubectl, overlay)
    client = cp.client()

    def answers() -> bool:
        node.check_alive()
        return _answers(client)

    try:
        wait_for("the FPGA webhook answering through the API server", answers, timeout=timeout)
    except TimeoutError as error:
        raise AssertionError(f"{error}; webhook log:\n{installed.log()[-4000:]}") from None
    finally:
        client.close()
    return installed
