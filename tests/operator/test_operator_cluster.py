"""Operator tests against a real control plane; skipped unless ``OPERATOR_TEST_KUBECONFIG`` names one.

The control plane (etcd, kube-apiserver, kube-controller-manager, kwok) comes from the project's integration
harness; these tests only need an admin kubeconfig for it. They install the CRDs, run the operator as a
subprocess and drive it through the API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("OPERATOR_TEST_KUBECONFIG", "")
KUBECTL = shutil.which("kubectl")
NS = "intel-operator-test"

pytestmark = pytest.mark.skipif(
    not KUBECONFIG or KUBECTL is None, reason="needs OPERATOR_TEST_KUBECONFIG and kubectl"
)

T = TypeVar("T")


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run(
        [KUBECTL, f"--kubeconfig={KUBECONFIG}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def get_json(*args: str) -> dict[str, Any] | None:
    out = kubectl("get", *args, "-o", "yaml", check=False)
    if out.returncode != 0:
        return None
    doc: dict[str, Any] = yaml.safe_load(out.stdout)
    return doc


def eventually(probe: Callable[[], T | None], limit_s: float = 20.0) -> T:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


@pytest.fixture(scope="module")
def crds() -> None:
    kubectl("apply", "--server-side", "-k", str(ROOT / "deploy" / "crds"))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    kubectl("create", "namespace", NS, check=False)


@pytest.fixture(scope="module")
def operator(crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    exe = Path(sys.executable).with_name("intel_deviceplugin_operator")
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    certs = tmp_path_factory.mktemp("certs")
    env = {
        **os.environ,
        "KUBECONFIG": KUBECONFIG,
        "DEVICEPLUGIN_NAMESPACE": NS,
        "INTEL_NPU_PLUGIN_SHA": "registry.test/intel/intel-npu-plugin@sha256:" + "0" * 64,
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                f"--webhook-cert-dir={certs}",
                "--webhook-port=0",
                "--health-probe-bind-address=0",
                "--metrics-bind-address=0",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        yield proc
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()[-4000:]


def test_samples_pass_server_side_dry_run(crds: None) -> None:
    out = kubectl(
        "apply", "--server-side", "--dry-run=server", "-k", str(ROOT / "deploy" / "operator" / "samples")
    )
    assert out.stdout.count("serverside-applied") == 8, out.stdout


def cr(kind: str, name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"apiVersion": "deviceplugin.intel.com/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    )


def test_create_update_delete_gpu(operator: subprocess.Popen[bytes]) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=cr(
            "GpuDevicePlugin",
            "t1",
            {
                "image": "intel/intel-gpu-plugin:0.36.0",
                "sharedDevNum": 2,
                "nodeSelector": {"t": "1"},
                "tolerations": [{"operator": "Exists"}],
            },
        ),
    )
    ds = eventually(lambda: get_json("daemonset", "-n", NS, "intel-gpu-plugin-t1"))
    owner = ds["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("GpuDevicePlugin", "t1", True)
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"t": "1"} and pod["tolerations"] == [{"operator": "Exists"}]
    assert "-shared-dev-num" in pod["containers"][0]["args"]

    kubectl("patch", "gpudeviceplugin", "t1", "--type=merge", "-p", '{"spec":{"sharedDevNum":5}}')
    eventually(
        lambda: (
            "5"
            in (get_json("daemonset", "-n", NS, "intel-gpu-plugin-t1") or {})
            .get("spec", {})
            .get("template", {})
            .get("spec", {})
            .get("containers", [{}])[0]
            .get("args", [])
        )
    )

    kubectl("delete", "daemonset", "-n", NS, "intel-gpu-plugin-t1")
    eventually(lambda: get_json("daemonset", "-n", NS, "intel-gpu-plugin-t1"))

    status = eventually(lambda: (get_json("gpudeviceplugin", "t1") or {}).get("status"))
    assert status["controlledDaemonSet"]["name"] == "intel-gpu-plugin-t1"
    kubectl("delete", "gpudeviceplugin", "t1")
    assert operator.poll() is None


def test_sha_override(operator: subprocess.Popen[bytes]) -> None:
    kubectl("apply", "-f", "-", stdin=cr("NpuDevicePlugin", "t2", {"image": "intel/intel-npu-plugin:0.36.0"}))
    ds = eventually(lambda: get_json("daemonset", "-n", NS, "intel-npu-plugin-t2"))
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("registry.test/intel/intel-npu-plugin@sha256:")
    kubectl("delete", "npudeviceplugin", "t2")
