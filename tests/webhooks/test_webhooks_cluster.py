"""The pod webhooks through the real API server (kube-apiserver 1.37.2 of the integration tier).

The operator is installed from ``deploy/operator/self-signed`` and runs locally with all kinds enabled (see
``k8stest.operatorinstall``), so the API server calls its ``/pods`` and ``/mutate--v1-pod`` over TLS with the
CA the operator injected, as it would in a cluster.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import http.server
import json
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.kube.certs import issue
from intel_device_plugins.kube.selfcerts import write_pair
from intel_device_plugins.webhooks import sgx
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.operatorinstall import Installed, install
from tests.webhooks.podfixtures import AF_NLB0, IFACE, NLB0, af, with_resources

pytestmark = pytest.mark.k8s

AF_PATH = "/apis/fpga.intel.com/v2/namespaces/{ns}/acceleratorfunctions"


@pytest.fixture(scope="module")
def installed(
    k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    setup = install(k8s_control_plane, tmp_path_factory.mktemp("webhooks"))
    try:
        yield setup
    finally:
        setup.stop()


@pytest.fixture
def admin(installed: Installed) -> Iterator[KubeClient]:
    c = installed.cp.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def namespace(admin: KubeClient) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = f"wh-{uuid.uuid4().hex[:8]}"
        admin.create("/api/v1/namespaces", {"metadata": {"name": name}})
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            admin.delete(f"/api/v1/namespaces/{name}")
        except ApiError as e:
            if e.status != 404:
                raise


def new_pod(name: str, *containers: dict[str, Any], annotations: dict[str, str] | None = None) -> JSON:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers)}}


def create_pod(admin: KubeClient, ns: str, pod: JSON) -> JSON:
    return admin.create(f"/api/v1/namespaces/{ns}/pods", pod)


def test_af_name_is_mapped_and_other_namespaces_do_not_see_it(
    admin: KubeClient, namespace: Callable[[], str]
) -> None:
    mine, other = namespace(), namespace()
    admin.create(AF_PATH.format(ns=mine), af("arria10-nlb0", ns=mine))
    admin.create(AF_PATH.format(ns=mine), af("arria10-nlb0-orchestrated", mode="region", ns=mine))
    request = {"fpga.intel.com/arria10-nlb0": "1", "cpu": "100m"}
    count = iter(range(1000))

    def created() -> JSON | None:
        try:
            return create_pod(admin, mine, new_pod(f"af-{next(count)}", with_resources("app", request)))
        except ApiError as e:
            if "no such resource" in str(e):  # the watch has not delivered the AF yet
                return None
            raise

    pod = wait_for("the FPGA webhook to know the AF", created, timeout=30)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {AF_NLB0: "1", "cpu": "100m"}
    assert pod["spec"]["containers"][0]["resources"]["requests"] == limits

    region_pod = create_pod(
        admin, mine, new_pod("orch", with_resources("app", {"fpga.intel.com/arria10-nlb0-orchestrated": "2"}))
    )
    container = region_pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {f"fpga.intel.com/region-{IFACE}": "2"}
    assert container["env"] == [
        {"name": "FPGA_AFU_1", "value": NLB0},
        {"name": "FPGA_AFU_2", "value": NLB0},
        {"name": "FPGA_REGION_1", "value": IFACE},
        {"name": "FPGA_REGION_2", "value": IFACE},
    ]

    with pytest.raises(ApiError) as denied:
        create_pod(admin, other, new_pod("af", with_resources("app", request)))
    assert denied.value.status == 403
    assert 'no such resource: "fpga.intel.com/arria10-nlb0"' in str(denied.value)


def test_crd_rejects_modes_other_than_af_and_region(admin: KubeClient, namespace: Callable[[], str]) -> None:
    ns = namespace()
    with pytest.raises(ApiError) as rejected:
        admin.create(AF_PATH.format(ns=ns), af("bad", mode="afx", ns=ns))
    assert rejected.value.status == 422
    assert "spec.mode" in str(rejected.value)


def test_sgx_pod_with_aesmd_sidecar_gets_exactly_the_patch_and_reinvocation_changes_nothing(
    admin: KubeClient, namespace: Callable[[], str]
) -> None:
    ns = namespace()
    pod = new_pod(
        "enclave",
        with_resources("app", {"sgx.intel.com/epc": "1Mi"}),
        with_resources("aesmd", {"sgx.intel.com/epc": "2Mi"}, env=[{"name": "X", "value": "y"}]),
        annotations={"sgx.intel.com/quote-provider": "aesmd"},
    )
    created = create_pod(admin, ns, pod)
    assert created["metadata"]["annotations"] == {
        "sgx.intel.com/quote-provider": "aesmd",
        "sgx.intel.com/epc": "3Mi",
    }
    app, aesmd = created["spec"]["containers"]
    for c, epc in ((app, "1Mi"), (aesmd, "2Mi")):
        expected = {"sgx.intel.com/epc": epc, "sgx.intel.com/enclave": "1"}
        if c is aesmd:
            expected["sgx.intel.com/provision"] = "1"
        assert c["resources"]["limits"] == expected == c["resources"]["requests"]
        assert {"name": "aesmd-socket", "mountPath": "/var/run/aesmd"} in c["volumeMounts"]
    assert app["env"] == [{"name": "SGX_AESM_ADDR", "value": "1"}]
    assert aesmd["env"] == [{"name": "X", "value": "y"}, {"name": "SGX_AESM_ADDR", "value": "1"}]
    assert {"name": "aesmd-socket", "emptyDir": {"medium": "Memory"}} in created["spec"]["volumes"]
    # What the API server stored is a fixed point of the mutation: a reinvocation would change nothing.
    assert sgx.mutate_pod(created) == []

    # Sending the mutated pod again (as a reinvocation does) gives the same pod back, with no second env var.
    again = copy.deepcopy(created)
    again["metadata"] = {"name": "enclave-again", "annotations": created["metadata"]["annotations"]}
    for key in ("nodeName", "serviceAccountName", "serviceAccount"):
        again["spec"].pop(key, None)
    again["spec"]["volumes"] = [v for v in again["spec"]["volumes"] if v["name"] == "aesmd-socket"]
    for c in again["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] == "aesmd-socket"]
    again.pop("status", None)
    second = create_pod(admin, ns, again)
    assert [c["env"] for c in second["spec"]["containers"]] == [app["env"], aesmd["env"]]
    assert second["spec"]["volumes"].count({"name": "aesmd-socket", "emptyDir": {"medium": "Memory"}}) == 1
    assert second["metadata"]["annotations"] == created["metadata"]["annotations"]


def test_kube_system_is_not_sent_to_the_webhooks(admin: KubeClient) -> None:
    name = f"wh-{uuid.uuid4().hex[:8]}"
    pod = new_pod(name, with_resources("app", {"fpga.intel.com/not-mapped-anywhere": "1"}))
    created = create_pod(admin, "kube-system", pod)
    try:
        assert created["spec"]["containers"][0]["resources"]["limits"] == {
            "fpga.intel.com/not-mapped-anywhere": "1"
        }
    finally:
        admin.delete(f"/api/v1/namespaces/kube-system/pods/{name}")


def test_operator_log_has_no_webhook_errors(installed: Installed, tmp_path: Path) -> None:
    text = installed.operators[0].log()
    assert "Traceback" not in text, text[-4000:]


class _Relabel(http.server.BaseHTTPRequestHandler):
    """A later mutating webhook that labels every pod, so the API server reinvokes the SGX webhook."""

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        labelled = "labels" in review["request"]["object"]["metadata"]
        ops = [] if labelled else [{"op": "add", "path": "/metadata/labels", "value": {"relabelled": "yes"}}]
        response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
        if ops:
            response |= {
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
            }
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def relabelling_webhook(admin: KubeClient, tmp_path: Path) -> Iterator[None]:
    bundle = issue(None, ("localhost",), dt.datetime.now(dt.UTC))
    write_pair(tmp_path, bundle)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Relabel)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    name = "zz-relabel-test"  # sorts after the operator's configuration, so it runs after the SGX webhook
    admin.create(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        {
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "relabel.test.intel.com",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"https://localhost:{server.server_address[1]}/relabel",
                        "caBundle": base64.b64encode(bundle.ca_bundle()).decode(),
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                    "objectSelector": {
                        "matchExpressions": [{"key": "relabel-test", "operator": "DoesNotExist"}]
                    },
                    "namespaceSelector": {"matchLabels": {"relabel-test": "yes"}},
                }
            ],
        },
    )
    try:
        yield
    finally:
        admin.delete(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}")
        server.shutdown()
        server.server_close()


def test_sgx_webhook_reinvoked_by_a_later_webhook_changes_nothing_more(
    admin: KubeClient, namespace: Callable[[], str], relabelling_webhook: None
) -> None:
    """Upstream appended SGX_AESM_ADDR again on the reinvocation that a later webhook's change causes."""
    ns = namespace()
    admin.merge_patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": {"relabel-test": "yes"}}})
    pod = new_pod(
        "reinvoked",
        with_resources("app", {"sgx.intel.com/epc": "1Mi"}),
        annotations={"sgx.intel.com/quote-provider": "aesmd"},
    )

    def created() -> JSON | None:
        out = create_pod(admin, ns, pod)
        if out["metadata"].get("labels") != {"relabelled": "yes"}:  # namespace label not yet seen: try again
            admin.delete(f"/api/v1/namespaces/{ns}/pods/reinvoked")
            return None
        return out

    out = wait_for("the relabelling webhook to run", created, timeout=30)
    (app,) = out["spec"]["containers"]
    assert app["env"] == [{"name": "SGX_AESM_ADDR", "value": "1"}]
    assert app["volumeMounts"].count({"name": "aesmd-socket", "mountPath": "/var/run/aesmd"}) == 1
    assert [v["name"] for v in out["spec"]["volumes"]].count("aesmd-socket") == 1
    assert out["metadata"]["annotations"]["sgx.intel.com/epc"] == "1Mi"
