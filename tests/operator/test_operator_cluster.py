"""The operator on the real control plane (kube-apiserver 1.37.2, KCM, scheduler, kwok nodes).

Set-up, once for the module, on the session's control plane: see
``k8stest.operatorinstall``. In short, ``kubectl apply -k deploy/operator/self-signed``;
the operator runs as a local process with the Deployment's flags and its ServiceAccount token, because its
Deployment pod would land on a kwok node, which runs nothing; the API server calls the webhooks through an
ExternalName Service to loopback, trusting the CA the operator issued and injected itself.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import json
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from intel_device_plugins.operator.images import node_image
from intel_device_plugins.operator.kinds import ALL_KINDS, API_VERSION, DeviceKind
from intel_device_plugins.operator.reconcile import plan
from intel_device_plugins.operator.validation import default_spec, validate_object
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import JSON, ApiError, KubeClient, wait_for
from k8stest.kwok import wait_daemonset_ready
from k8stest.operatorinstall import (
    DRA_DRIVER_SA,
    FPGA_PLUGIN_SA,
    NS,
    SA,
    SECRET,
    SERVICE,
    WEBHOOK_CONFIGS,
    Installed,
    install,
)

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "deploy" / "operator" / "samples"
NPU_SHA = "registry.test/intel/intel-npu-plugin@sha256:" + "0" * 64
TEST_LABEL = "operator-test.intel.com/pool"


def _load_validation_tables() -> Any:
    """The unit tests' accept and reject tables, replayed here through the API server."""
    path = Path(__file__).with_name("test_operator_validation.py")
    spec = importlib.util.spec_from_file_location("operator_validation_tables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLES = _load_validation_tables()


@pytest.fixture(scope="module")
def installed(
    k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    setup = install(k8s_control_plane, tmp_path_factory.mktemp("operator"), {"INTEL_NPU_PLUGIN_SHA": NPU_SHA})
    try:
        yield setup
    finally:
        logs = setup.stop()
    for name, text in logs.items():
        forbidden = [
            line
            for line in text.splitlines()
            if "forbidden" in line.lower() and not during_restart(line, setup.apiserver_restarts)
        ]
        assert not forbidden, f"{name} hit RBAC denials with the shipped roles:\n" + "\n".join(forbidden)


def during_restart(line: str, restarts: list[tuple[dt.datetime, dt.datetime]]) -> bool:
    """Whether a log line falls in an API server restart or the 15 s after it.

    A restarted kube-apiserver answers 403 for a moment while its RBAC caches fill, even after /readyz;
    the operator retries those requests like any other error.
    """
    try:
        stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return False
    return any(start <= stamp <= end + dt.timedelta(seconds=15) for start, end in restarts)


@pytest.fixture(autouse=True)
def one_leader(installed: Installed) -> Iterator[None]:
    """Whatever a test did to the replicas, passing or failing half-way, the next one starts with exactly
    one running, leading and serving the webhooks: replicas a test started and left are stopped here (a
    fixture's teardown runs whatever the test's outcome)."""
    yield
    installed.restore_one_leader()


@pytest.fixture
def admin(installed: Installed) -> Iterator[KubeClient]:
    c = installed.cp.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def crs(admin: KubeClient) -> Iterator[Callable[[DeviceKind, str, dict[str, Any]], JSON]]:
    """Factory creating CRs through the API server (and so through the webhooks); deleted afterwards."""
    made: list[tuple[DeviceKind, str]] = []

    def create(kind: DeviceKind, name: str, spec: dict[str, Any]) -> JSON:
        made.append((kind, name))
        return admin.create(cr_path(kind), cr_body(kind, name, spec))

    yield create
    for kind, name in made:
        try:
            admin.delete(cr_path(kind, name))
        except ApiError as e:
            if e.status != 404:
                raise


def eventually(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    return wait_for(what, probe, timeout=timeout, interval=0.1)


def cr_path(kind: DeviceKind, name: str = "") -> str:
    base = f"/apis/{API_VERSION}/{kind.plural}"
    return f"{base}/{name}" if name else base


def ds_path(kind: DeviceKind, cr_name: str) -> str:
    return f"/apis/apps/v1/namespaces/{NS}/daemonsets/{kind.daemonset_name(cr_name)}"


def cr_body(kind: DeviceKind, name: str, spec: dict[str, Any]) -> JSON:
    return {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": {"name": name}, "spec": spec}


def get_or_none(client: KubeClient, path: str) -> JSON | None:
    try:
        return client.get(path)
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def sample_spec(kind: DeviceKind) -> dict[str, Any]:
    doc = yaml.safe_load((SAMPLES / f"deviceplugin_v1_{kind.singular}.yaml").read_text())
    spec: dict[str, Any] = doc["spec"]
    return spec


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def status_matches(admin: KubeClient, kind: DeviceKind, name: str, nodes: set[str]) -> JSON | None:
    cr = admin.get(cr_path(kind, name))
    st = cr.get("status") or {}
    ok = (
        st.get("desiredNumberScheduled") == len(nodes)
        and st.get("numberReady") == len(nodes)
        and set(st.get("nodeNames") or ()) == nodes
    )
    return cr if ok else None


# -- Done when: the overlay plus a sample yields a Ready plugin DaemonSet


def test_overlay_and_sample_give_ready_daemonset_on_matching_nodes(
    installed: Installed, admin: KubeClient, kwok_nodes: Callable[..., list[str]]
) -> None:
    """``kubectl apply -k deploy/operator/self-signed`` (module set-up) plus the GPU sample.

    The operator is a local process with the Deployment's flags and ServiceAccount (see the module
    docstring): its Deployment pod would land on a kwok node, which does not really run containers.
    """
    gpu_nodes = set(kwok_nodes(3, labels={"intel.feature.node.kubernetes.io/gpu": "true"}))
    other = set(kwok_nodes(1))
    installed.kubectl("apply", "-f", str(SAMPLES / "deviceplugin_v1_gpudeviceplugin.yaml"))
    try:
        ds = wait_daemonset_ready(
            admin, NS, "intel-gpu-plugin-gpudeviceplugin-sample", expected=3, timeout=120
        )
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == {
            "intel.feature.node.kubernetes.io/gpu": "true"
        }
        pods = admin.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=app=intel-gpu-plugin")["items"]
        on = {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith(ds["metadata"]["name"])}
        assert on == gpu_nodes and not on & other
        eventually(
            "GpuDevicePlugin status to report the 3 nodes",
            lambda: status_matches(admin, DeviceKind.GPU, "gpudeviceplugin-sample", gpu_nodes),
            timeout=30,
        )
    finally:
        installed.kubectl("delete", "-f", str(SAMPLES / "deviceplugin_v1_gpudeviceplugin.yaml"), check=False)


def test_every_sample_passes_server_side_dry_run(installed: Installed) -> None:
    out = installed.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(SAMPLES))
    assert out.stdout.count("serverside-applied (server dry run)") == len(ALL_KINDS), out.stdout


# -- Every kind: create, update, delete


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_create_update_delete(
    kind: DeviceKind, installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    name = unique(f"crud-{kind.value}")
    spec = {
        **sample_spec(kind),
        "nodeSelector": {TEST_LABEL: name},
        "tolerations": [{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    }
    cr = crs(kind, name, spec)
    ds = eventually(f"DaemonSet of {name}", lambda: get_or_none(admin, ds_path(kind, name)), timeout=20)

    owners = ds["metadata"]["ownerReferences"]
    assert owners == [
        {
            "apiVersion": API_VERSION,
            "kind": kind.kind,
            "name": name,
            "uid": cr["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert_matches_plan(kind, admin.get(cr_path(kind, name)), ds)
    pod = ds["spec"]["template"]["spec"]
    # IAA always adds the amd64 selector, as upstream does
    arch = {"kubernetes.io/arch": "amd64"} if kind is DeviceKind.IAA else {}
    assert pod["nodeSelector"] == {TEST_LABEL: name, **arch}
    assert pod["tolerations"] == spec["tolerations"]

    # Update: the spec change reaches the DaemonSet.
    admin.merge_patch(cr_path(kind, name), {"spec": {"logLevel": 7}})

    def updated() -> JSON | None:
        d = admin.get(ds_path(kind, name))
        return (
            d
            if "-v" in (args := d["spec"]["template"]["spec"]["containers"][0]["args"]) and "7" in args
            else None
        )

    ds = eventually(f"DaemonSet of {name} with logLevel 7", updated, timeout=20)
    assert_matches_plan(kind, admin.get(cr_path(kind, name)), ds)

    status = eventually(
        f"status of {name}",
        lambda: (admin.get(cr_path(kind, name)).get("status") or {}).get("controlledDaemonSet"),
    )
    assert status["name"] == kind.daemonset_name(name) and status["uid"] == ds["metadata"]["uid"]

    # Delete: the garbage collector removes the owned DaemonSet.
    admin.delete(cr_path(kind, name))
    eventually(
        f"DaemonSet of {name} to go", lambda: get_or_none(admin, ds_path(kind, name)) is None, timeout=60
    )


def contains(got: Any, want: Any) -> bool:
    """``want`` is ``got`` with some server defaults left out (dict keys only; lists keep their length)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and contains(got[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(contains, got, want))
    return bool(got == want)


def assert_matches_plan(kind: DeviceKind, cr: JSON, ds: JSON) -> None:
    """The DaemonSet in the cluster carries what the builder derives from the CR (server defaults aside)."""
    want = plan(
        kind, cr, {"INTEL_NPU_PLUGIN_SHA": NPU_SHA}, NS, fpga_service_account=FPGA_PLUGIN_SA
    ).daemonset
    assert want is not None
    assert ds["metadata"]["labels"].items() >= want["metadata"]["labels"].items()
    got_pod, want_pod = ds["spec"]["template"]["spec"], want["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "serviceAccountName"):
        assert contains(got_pod.get(key), want_pod.get(key)), key
    for section in ("containers", "initContainers"):
        got = {c["name"]: c for c in got_pod.get(section) or ()}
        for c in want_pod.get(section) or ():
            g = got.pop(c["name"])
            for key in ("image", "command", "args", "env", "securityContext"):
                if key in c:
                    assert contains(g.get(key), c[key]), (section, c["name"], key, g.get(key), c[key])
            assert [m["mountPath"] for m in g.get("volumeMounts") or ()] == [
                m["mountPath"] for m in c.get("volumeMounts") or ()
            ]
        assert not got, f"unexpected {section}: {list(got)}"
    assert [v["name"] for v in got_pod.get("volumes") or ()] == [
        v["name"] for v in want_pod.get("volumes") or ()
    ]


# -- Status, node selectors and tolerations with kwok nodes


def test_status_follows_nodes(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    pool = unique("status")
    nodes = kwok_nodes(3, labels={TEST_LABEL: pool})
    crs(DeviceKind.GPU, pool, {"nodeSelector": {TEST_LABEL: pool}})
    eventually(
        "status with 3 nodes", lambda: status_matches(admin, DeviceKind.GPU, pool, set(nodes)), timeout=60
    )

    admin.merge_patch(f"/api/v1/nodes/{nodes[0]}", {"metadata": {"labels": {TEST_LABEL: None}}})
    eventually(
        "status with 2 nodes", lambda: status_matches(admin, DeviceKind.GPU, pool, set(nodes[1:])), timeout=60
    )

    (extra,) = kwok_nodes(1, labels={TEST_LABEL: pool})
    eventually(
        "status with a new node",
        lambda: status_matches(admin, DeviceKind.GPU, pool, {*nodes[1:], extra}),
        timeout=60,
    )


def test_tolerations_decide_tainted_nodes(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    pool = unique("taint")
    plain, tainted = kwok_nodes(2, labels={TEST_LABEL: pool})
    admin.merge_patch(
        f"/api/v1/nodes/{tainted}",
        {"spec": {"taints": [{"key": "example.com/dedicated", "value": "x", "effect": "NoSchedule"}]}},
    )
    crs(DeviceKind.QAT, pool, {"nodeSelector": {TEST_LABEL: pool}})
    eventually(
        "QAT plugin only on the untainted node", lambda: status_matches(admin, DeviceKind.QAT, pool, {plain})
    )

    toleration = {"key": "example.com/dedicated", "operator": "Equal", "value": "x", "effect": "NoSchedule"}
    admin.merge_patch(cr_path(DeviceKind.QAT, pool), {"spec": {"tolerations": [toleration]}})
    eventually(
        "QAT plugin on both nodes once tolerated",
        lambda: status_matches(admin, DeviceKind.QAT, pool, {plain, tainted}),
        timeout=60,
    )


def test_overlapping_selectors_report_node_conflict(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    pool = unique("overlap")
    (node,) = kwok_nodes(1, labels={TEST_LABEL: pool})
    first, second = f"{pool}-a", f"{pool}-b"
    crs(DeviceKind.SGX, first, {"nodeSelector": {TEST_LABEL: pool}})
    crs(DeviceKind.SGX, second, {"nodeSelector": {"kubernetes.io/hostname": node}})

    def conflict(name: str, other: str) -> bool:
        conds = (admin.get(cr_path(DeviceKind.SGX, name)).get("status") or {}).get("conditions") or []
        return any(
            c["type"] == "NodeConflict"
            and c["status"] == "True"
            and other in c["message"]
            and node in c["message"]
            for c in conds
        )

    eventually(
        "NodeConflict on both", lambda: conflict(first, second) and conflict(second, first), timeout=60
    )
    admin.delete(cr_path(DeviceKind.SGX, second))

    def cleared() -> bool:
        conds = (admin.get(cr_path(DeviceKind.SGX, first)).get("status") or {}).get("conditions") or []
        return any(c["type"] == "NodeConflict" and c["status"] == "False" for c in conds)

    eventually("NodeConflict cleared", cleared, timeout=60)


# -- Images: _SHA overrides and upgrades


def test_sha_override_and_upgrade(installed: Installed, admin: KubeClient, crs: Callable[..., JSON]) -> None:
    npu, gpu = unique("sha"), unique("upgrade")
    crs(DeviceKind.NPU, npu, {"image": "intel/intel-npu-plugin:0.36.0", "nodeSelector": {TEST_LABEL: npu}})
    old = crs(
        DeviceKind.GPU, gpu, {"image": "intel/intel-gpu-plugin:0.31.0", "nodeSelector": {TEST_LABEL: gpu}}
    )
    assert old["spec"]["image"] == "intel/intel-gpu-plugin:0.31.0"

    def image(kind: DeviceKind, name: str) -> str | None:
        ds = get_or_none(admin, ds_path(kind, name))
        return None if ds is None else str(ds["spec"]["template"]["spec"]["containers"][0]["image"])

    assert eventually("NPU DaemonSet", lambda: image(DeviceKind.NPU, npu)) == NPU_SHA
    # upstream's 0.31.0 is older than the release this project replaces: the operator's plugin image runs
    assert eventually("GPU DaemonSet", lambda: image(DeviceKind.GPU, gpu)) == node_image()
    # The CR keeps the user's intent: no drift for GitOps tools.
    assert admin.get(cr_path(DeviceKind.GPU, gpu))["spec"]["image"] == "intel/intel-gpu-plugin:0.31.0"


def test_hand_edits_are_reverted_and_deleted_daemonset_recreated(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    name = unique("drift")
    crs(DeviceKind.DLB, name, {"nodeSelector": {TEST_LABEL: name}})
    ds = eventually("DLB DaemonSet", lambda: get_or_none(admin, ds_path(DeviceKind.DLB, name)))
    admin.merge_patch(
        ds_path(DeviceKind.DLB, name),
        {"spec": {"template": {"spec": {"nodeSelector": {TEST_LABEL: "hijacked"}}}}},
    )
    eventually(
        "node selector restored",
        lambda: (
            admin.get(ds_path(DeviceKind.DLB, name))["spec"]["template"]["spec"]["nodeSelector"]
            == {TEST_LABEL: name}
        ),
    )
    admin.delete(ds_path(DeviceKind.DLB, name))
    eventually(
        "DaemonSet re-created",
        lambda: (
            (d := get_or_none(admin, ds_path(DeviceKind.DLB, name))) is not None
            and d["metadata"]["uid"] != ds["metadata"]["uid"]
        ),
        timeout=30,
    )


# -- Admission through the API server


@pytest.mark.parametrize(
    ("kind", "spec"), TABLES.ACCEPT, ids=lambda v: v.value if isinstance(v, DeviceKind) else ""
)
def test_api_server_accepts(kind: DeviceKind, spec: dict[str, Any], admin: KubeClient) -> None:
    created = admin.create(cr_path(kind) + "?dryRun=All", cr_body(kind, unique("accept"), spec))
    assert contains(created["spec"], spec)  # plus CRD schema defaults


@pytest.mark.parametrize(
    ("kind", "spec", "field", "text"),
    TABLES.REJECT,
    ids=lambda v: v.value if isinstance(v, DeviceKind) else "",
)
def test_api_server_rejects_naming_the_field(
    kind: DeviceKind, spec: dict[str, Any], field: str, text: str, admin: KubeClient
) -> None:
    body = cr_body(kind, unique("reject"), spec)
    if validate_object(kind, {"spec": default_spec(kind, spec)}).allowed:
        # Rejected by the validator alone, but the defaulting webhook runs first and repairs it (empty image).
        created = admin.create(cr_path(kind) + "?dryRun=All", body)
        assert created["spec"]["image"] == default_spec(kind, spec)["image"]
        return
    with pytest.raises(ApiError) as err:
        admin.create(cr_path(kind) + "?dryRun=All", body)
    assert err.value.status in (400, 422), err.value
    message = str(err.value)
    assert field.split("[")[0] in message, message
    if "denied the request" in message:  # our validating webhook (not the CRD schema) answered
        assert f"{field}: " in message and text in message, message


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_api_server_defaults_image_and_validates_updates(kind: DeviceKind, admin: KubeClient) -> None:
    name = unique("default")
    created = admin.create(cr_path(kind), cr_body(kind, name, {"nodeSelector": {TEST_LABEL: name}}))
    try:
        assert created["spec"]["image"] == node_image()
        with pytest.raises(ApiError) as err:
            admin.merge_patch(
                cr_path(kind, name), {"spec": {"image": f"intel/intel-{kind.value}-plugin:devel"}}
            )
        assert "spec.image: " in str(err.value)
    finally:
        admin.delete(cr_path(kind, name))


def webhook_calls(admin: KubeClient, webhook: str) -> int:
    """How many times the API server has called ``webhook`` (its own admission metrics)."""
    total = 0
    for line in admin.get("/metrics")["text"].splitlines():
        if line.startswith("apiserver_admission_webhook_request_total{") and f'name="{webhook}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


@pytest.mark.parametrize("kind", [DeviceKind.GPU, DeviceKind.SGX], ids=lambda k: k.value)
def test_defaulting_webhook_is_called_only_for_an_image_to_default(
    kind: DeviceKind, admin: KubeClient
) -> None:
    """The mutating entry's matchCondition spares the call when ``spec.image`` is set (nothing to default),
    and still makes it for an empty image, which the webhook then defaults."""
    mutating, validating = f"m{kind.singular}.kb.io", f"v{kind.singular}.kb.io"
    named, empty = unique("named"), unique("empty")
    before = (webhook_calls(admin, mutating), webhook_calls(admin, validating))
    admin.create(
        cr_path(kind), cr_body(kind, named, {"image": node_image(), "nodeSelector": {TEST_LABEL: named}})
    )
    try:
        after_named = (webhook_calls(admin, mutating), webhook_calls(admin, validating))
        assert after_named == (before[0], before[1] + 1)
        created = admin.create(
            cr_path(kind), cr_body(kind, empty, {"image": "", "nodeSelector": {TEST_LABEL: empty}})
        )
        try:
            assert created["spec"]["image"] == node_image()
            assert webhook_calls(admin, mutating) >= after_named[0] + 1
        finally:
            admin.delete(cr_path(kind, empty))
    finally:
        admin.delete(cr_path(kind, named))


def test_invalid_cr_is_rejected_by_kubectl_with_the_field(installed: Installed) -> None:
    body = cr_body(
        DeviceKind.GPU,
        unique("invalid"),
        {"image": "intel/intel-gpu-plugin:0.36.0", "preferredAllocationPolicy": "packed"},
    )
    out = installed.kubectl("apply", "-f", "-", stdin=json.dumps(body), check=False)
    assert out.returncode != 0
    assert 'admission webhook "vgpudeviceplugin.kb.io" denied the request' in out.stderr, out.stderr
    assert (
        "invalid resource: spec.preferredAllocationPolicy: 'packed' PreferredAllocationPolicy is valid only "
        "when setting sharedDevNum > 1" in out.stderr
    ), out.stderr


# -- Self-managed certificates and the shipped RBAC


def test_self_managed_certificate_is_issued_injected_and_served(
    installed: Installed, admin: KubeClient
) -> None:
    import base64

    data = admin.get(f"/api/v1/namespaces/{NS}/secrets/{SECRET}")["data"]
    ca_pem = base64.b64decode(data["ca.crt"])
    for resource, name in WEBHOOK_CONFIGS.items():
        hooks = admin.get(f"/apis/admissionregistration.k8s.io/v1/{resource}/{name}")["webhooks"]
        pod_hooks = 2 if resource.startswith("mutating") else 0  # the FPGA and SGX pod webhooks
        assert len(hooks) == len(ALL_KINDS) + pod_hooks
        for hook in hooks:
            assert ca_pem in base64.b64decode(hook["clientConfig"]["caBundle"])
    # The served certificate verifies against the CA for the Service's DNS name, as the API server checks it.
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", installed.webhook_port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=f"{SERVICE}.{NS}.svc") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{SERVICE}.{NS}.svc" in sans.get_values_for_type(x509.DNSName)


def test_a_deleted_certificate_secret_is_recreated_by_a_restarted_replica(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    """With the shipped RBAC only: the Secret deleted, the replica restarted (a new process, as the kubelet
    restarts a container) issues a new certificate, stores it in a new Secret, publishes its CA, leads
    again, and the API server's webhook calls succeed."""
    import base64

    leader = next(op for op in installed.operators if op.proc.alive() and installed.leader() == op.name)
    admin.delete(f"/api/v1/namespaces/{NS}/secrets/{SECRET}")
    assert get_or_none(admin, f"/api/v1/namespaces/{NS}/secrets/{SECRET}") is None
    leader.proc.stop()
    leader.restart()
    try:
        wait_for(f"{leader.name} /readyz after the restart", leader.ready, timeout=60)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; its log ends:\n{leader.log()[-3000:]}") from None
    # Its certificate directory (an emptyDir in the pod) survived the restart, so it may be ready before
    # its first certificate check has re-created the Secret.
    secret_path = f"/api/v1/namespaces/{NS}/secrets/{SECRET}"
    data = eventually("the Secret to be re-created", lambda: get_or_none(admin, secret_path), timeout=30)[
        "data"
    ]
    ca_pem = base64.b64decode(data["ca.crt"])
    validating = WEBHOOK_CONFIGS["validatingwebhookconfigurations"]
    eventually(
        "the new CA in the webhook configuration",
        lambda: all(
            ca_pem in base64.b64decode(h["clientConfig"]["caBundle"])
            for h in admin.get(
                f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{validating}"
            )["webhooks"]
        ),
        timeout=30,
    )
    trusting = ssl.create_default_context(cadata=ca_pem.decode())

    def serves_the_new_certificate() -> bool:  # the server reloads its files within 10 s
        try:
            with (
                socket.create_connection(("127.0.0.1", leader.webhook_port), timeout=5) as raw,
                trusting.wrap_socket(raw, server_hostname=f"{SERVICE}.{NS}.svc"),
            ):
                return True
        except ssl.SSLError:
            return False

    eventually("the new certificate to be served", serves_the_new_certificate, timeout=30)
    eventually("the restarted replica to lead", lambda: installed.leader() == leader.name, timeout=30)
    installed.route_webhooks_to(leader)
    name = unique("recreated")
    created = crs(DeviceKind.NPU, name, {"nodeSelector": {TEST_LABEL: name}})  # through both webhooks
    assert created["spec"]["image"]  # defaulted by the mutating webhook
    assert "forbidden" not in leader.log().lower()


def serves_certificate_of(port: int, ca_pem: bytes) -> bool:
    """Whether the webhook server on ``port`` completes a handshake trusting only ``ca_pem``, as the API
    server does with the CA bundle it was given."""
    trusting = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            trusting.wrap_socket(raw, server_hostname=f"{SERVICE}.{NS}.svc"),
        ):
            return True
    except ssl.SSLError:
        return False


def test_a_running_replica_serves_a_recreated_certificate_within_seconds(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    """Two replicas; the Secret is deleted and the leader restarted, as in the test above. The replica that
    kept running serves the certificate of the re-created Secret (whoever re-created it) within a few
    seconds, and CR writes routed to it pass both webhooks; it used to keep the old certificate, which the
    re-injected CA no longer trusts, until its own check up to five minutes later."""
    import base64

    secret_path = f"/api/v1/namespaces/{NS}/secrets/{SECRET}"
    leader = next(op for op in installed.operators if op.proc.alive() and installed.leader() == op.name)
    running = installed.start_operator(unique("operator-rotation"))
    old_ca = base64.b64decode(admin.get(secret_path)["data"]["ca.crt"])
    assert serves_certificate_of(running.webhook_port, old_ca)
    try:
        leader.proc.stop()
        admin.delete(secret_path)
        leader.restart()
        data = eventually("the Secret to be re-created", lambda: get_or_none(admin, secret_path), timeout=60)[
            "data"
        ]
        recreated_at = time.monotonic()
        ca_pem = base64.b64decode(data["ca.crt"])
        assert ca_pem != old_ca
        eventually(
            f"{running.name} to serve the re-created certificate",
            lambda: serves_certificate_of(running.webhook_port, ca_pem),
            timeout=10,
        )
        waited = time.monotonic() - recreated_at
        print(f"the running replica served the re-created certificate after {waited:.1f} s")
        assert not serves_certificate_of(running.webhook_port, old_ca)
        wait_for(f"{leader.name} /readyz after the restart", leader.ready, timeout=60)
        eventually(
            f"{leader.name} to serve the re-created certificate",
            lambda: serves_certificate_of(leader.webhook_port, ca_pem),
            timeout=10,
        )
        installed.route_webhooks_to(running)
        name = unique("rotated")
        created = crs(DeviceKind.NPU, name, {"nodeSelector": {TEST_LABEL: name}})  # through both webhooks
        assert created["spec"]["image"]
    finally:
        running.proc.stop()
        if not leader.proc.alive():
            leader.restart()
        wait_for(f"{leader.name} /readyz", leader.ready, timeout=60)
        eventually(f"{leader.name} to lead again", lambda: installed.leader() == leader.name, timeout=30)
        installed.route_webhooks_to(leader)
    assert "forbidden" not in running.log().lower()


def service_account_may(admin: KubeClient, name: str, attrs: dict[str, Any]) -> bool:
    """Whether ServiceAccount ``name`` of NS may do ``attrs``: the API server's SubjectAccessReview."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NS}:{name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
            **attrs,
        },
    }
    return bool(
        admin.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]["allowed"]
    )


def test_fpga_plugin_pods_run_as_the_node_getter_service_account(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    """The FPGA DaemonSet's pods run under the shipped FPGA ServiceAccount, which may get a node (the mode
    annotation) and nothing more: not list nodes, not read secrets; other kinds get no token at all."""
    pool = unique("fpga-sa")
    (node,) = kwok_nodes(1, labels={TEST_LABEL: pool})
    crs(DeviceKind.FPGA, pool, {"nodeSelector": {TEST_LABEL: pool}})
    ds = wait_daemonset_ready(admin, NS, DeviceKind.FPGA.daemonset_name(pool), expected=1, timeout=120)
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == FPGA_PLUGIN_SA
    assert pod_spec.get("automountServiceAccountToken") is not False
    pods = admin.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=app={DeviceKind.FPGA.daemonset_base}")
    assert {p["spec"]["serviceAccountName"] for p in pods["items"] if p["spec"]["nodeName"] == node} == {
        FPGA_PLUGIN_SA
    }
    may = functools.partial(service_account_may, admin, FPGA_PLUGIN_SA)
    ra = "resourceAttributes"
    assert may({ra: {"resource": "nodes", "verb": "get", "name": node}})
    assert not may({ra: {"resource": "nodes", "verb": "list"}})
    assert not may({ra: {"resource": "nodes", "verb": "patch", "name": node}})
    assert not may({ra: {"resource": "secrets", "verb": "get", "namespace": NS, "name": SECRET}})
    assert not may({ra: {"resource": "secrets", "verb": "list", "namespace": NS}})
    # the namespace's default ServiceAccount, which the other kinds' pods run under, cannot read nodes
    assert not service_account_may(admin, "default", {ra: {"resource": "nodes", "verb": "get", "name": node}})


def test_gpu_cr_switches_between_plugin_and_dra_driver(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    """deployAs DRADriver: the CR's DaemonSet runs the driver under the shipped driver ServiceAccount (whose
    own-node slice policy the operator installation ships), and switching back rolls it to the plugin."""
    pool = unique("gpu-dra")
    (node,) = kwok_nodes(1, labels={TEST_LABEL: pool})
    crs(DeviceKind.GPU, pool, {"nodeSelector": {TEST_LABEL: pool}, "deployAs": "DRADriver"})
    ds = wait_daemonset_ready(admin, NS, DeviceKind.GPU.daemonset_name(pool), expected=1, timeout=120)
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == DRA_DRIVER_SA
    assert pod_spec["containers"][0]["command"] == ["intel_gpu_dra_driver"]
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    eventually("the CR's status", lambda: status_matches(admin, DeviceKind.GPU, pool, {node}))
    policies = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    policy = f"{policies}/{DRA_DRIVER_SA}-resourceslices"
    assert DRA_DRIVER_SA in admin.get(policy)["spec"]["matchConditions"][0]["expression"]
    # A plugin-only field is refused by the webhook, naming it.
    with pytest.raises(ApiError) as info:
        admin.merge_patch(cr_path(DeviceKind.GPU, pool), {"spec": {"sharedDevNum": 2}})
    assert "spec.sharedDevNum" in str(info.value)
    admin.merge_patch(cr_path(DeviceKind.GPU, pool), {"spec": {"deployAs": "DevicePlugin"}})

    def plugin() -> JSON | None:
        got = admin.get(ds_path(DeviceKind.GPU, pool))
        return (
            got
            if got["spec"]["template"]["spec"]["containers"][0]["command"] == ["intel_gpu_device_plugin"]
            else None
        )

    back = eventually("the plugin DaemonSet", plugin)
    pod_back = back["spec"]["template"]["spec"]
    # The plugin pods run under the namespace default again, not the driver's identity.
    assert "serviceAccountName" not in pod_back and "serviceAccount" not in pod_back
    wait_daemonset_ready(admin, NS, DeviceKind.GPU.daemonset_name(pool), expected=1, timeout=120)


def test_operator_identity_is_only_the_service_account(installed: Installed, admin: KubeClient) -> None:
    """Its credentials are the ServiceAccount token; its rights are the shipped roles only."""
    kubeconfig = yaml.safe_load(installed.sa_kubeconfig.read_text())
    (user,) = kubeconfig["users"]
    assert user["name"] == f"system:serviceaccount:{NS}:{SA}"
    allowed = functools.partial(service_account_may, admin, SA)

    ra = "resourceAttributes"
    assert allowed({ra: {"group": "apps", "resource": "daemonsets", "verb": "patch", "namespace": NS}})
    assert not allowed(
        {ra: {"group": "apps", "resource": "daemonsets", "verb": "patch", "namespace": "default"}}
    )
    assert not allowed({ra: {"group": "apps", "resource": "daemonsets", "verb": "delete", "namespace": NS}})
    assert not allowed({ra: {"resource": "secrets", "verb": "list", "namespace": NS}})
    assert not allowed({ra: {"resource": "secrets", "verb": "get", "namespace": NS, "name": "other"}})
    assert allowed({ra: {"resource": "secrets", "verb": "update", "namespace": NS, "name": SECRET}})
    assert allowed({ra: {"resource": "secrets", "verb": "create", "namespace": NS}})  # re-creating it
    assert not allowed({ra: {"resource": "secrets", "verb": "create", "namespace": "default"}})
    assert not allowed(
        {ra: {"group": API_VERSION.split("/")[0], "resource": "gpudeviceplugins", "verb": "update"}}
    )
    # And with exactly these rights the operator did all of the above; the module teardown checks its log
    # for RBAC denials.


# -- Leader election between two processes, and an API server restart


def test_leader_failover_within_15_seconds(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    first = next(op for op in installed.operators if op.proc.alive() and installed.leader() == op.name)
    standby = installed.start_operator(unique("operator-b"))
    assert installed.leader() == first.name
    # Both serve admission; send it to the one that survives.
    installed.route_webhooks_to(standby)

    first.proc.kill()  # a crash: the Lease is not released
    killed_at = time.monotonic()
    eventually(f"{standby.name} to take the Lease", lambda: installed.leader() == standby.name, timeout=30)
    took_over = time.monotonic() - killed_at
    name = unique("failover")
    crs(DeviceKind.IAA, name, {"nodeSelector": {TEST_LABEL: name}})
    eventually(
        "the new leader to reconcile", lambda: get_or_none(admin, ds_path(DeviceKind.IAA, name)), timeout=30
    )
    reconciling = time.monotonic() - killed_at
    print(f"failover: Lease taken after {took_over:.1f} s, new CR reconciled after {reconciling:.1f} s")
    assert took_over <= 15.0, took_over
    assert reconciling <= 15.0 + 5.0, reconciling  # plus the controllers' start and one reconcile


def test_clean_shutdown_hands_over_at_once(installed: Installed, admin: KubeClient) -> None:
    leader = next(op for op in installed.operators if op.proc.alive() and installed.leader() == op.name)
    standby = installed.start_operator(unique("operator-c"))
    installed.route_webhooks_to(standby)
    t0 = time.monotonic()
    leader.proc.stop()
    assert leader.proc.popen.returncode == 0, leader.log()[-3000:]
    eventually("hand-over", lambda: installed.leader() == standby.name, timeout=15)
    assert time.monotonic() - t0 < 8.0  # released Lease: no waiting for expiry


def test_combined_mode_runs_every_kind_from_one_daemonset(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    """A leader started with DEVICEPLUGIN_COMBINED=true: one DaemonSet for a GPU and a QAT CR, Ready on the
    nodes either selects, each CR's status following it, and one for an SGX DRADriver CR; then the per-kind
    operator leads again."""
    managed = f"/apis/apps/v1/namespaces/{NS}/daemonsets?labelSelector=app.kubernetes.io/managed-by"
    eventually("earlier tests' DaemonSets to go", lambda: not admin.get(managed)["items"], timeout=60)
    # the one extra right of deploy/operator/combined, as its overlay renders it
    rendered = yaml.safe_load_all(
        installed.kubectl("kustomize", str(ROOT / "deploy/operator/overlays/combined")).stdout
    )
    rbac = [
        d
        for d in rendered
        if d and d["kind"] in ("Role", "RoleBinding") and "combined" in d["metadata"]["name"]
    ]
    assert len(rbac) == 2
    paths = []
    for doc in rbac:
        base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{doc['kind'].lower()}s"
        admin.create(base, doc)
        paths.append(f"{base}/{doc['metadata']['name']}")
    try:
        combined_mode_run(installed, admin, crs, kwok_nodes)
    finally:
        for path in paths:
            admin.delete(path)


def combined_mode_run(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON], kwok_nodes: Callable[..., list[str]]
) -> None:
    leader = next(op for op in installed.operators if op.proc.alive() and installed.leader() == op.name)
    plain_env = installed.extra_env
    installed.extra_env = {**plain_env, "DEVICEPLUGIN_COMBINED": "true"}
    try:
        combined = installed.start_operator(unique("operator-combined"))
    finally:
        installed.extra_env = plain_env
    installed.route_webhooks_to(combined)
    leader.proc.stop()
    eventually("the combined operator to lead", lambda: installed.leader() == combined.name, timeout=15)

    gpu, qat = unique("comb-gpu"), unique("comb-qat")
    nodes = set(kwok_nodes(1, labels={TEST_LABEL: gpu})) | set(kwok_nodes(1, labels={TEST_LABEL: qat}))
    crs(DeviceKind.GPU, gpu, {"nodeSelector": {TEST_LABEL: gpu}})
    crs(DeviceKind.QAT, qat, {"nodeSelector": {TEST_LABEL: qat}, "maxNumDevices": 3})
    path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/intel-device-plugins"
    eventually(
        "the combined DaemonSet to be owned by both CRs",
        lambda: len((get_or_none(admin, path) or {}).get("metadata", {}).get("ownerReferences") or ()) == 2,
    )
    ds = wait_daemonset_ready(admin, NS, "intel-device-plugins", expected=2, timeout=120)
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["intel_device_plugins"]
    assert [a.split()[0] for a in container["args"][3::2]] == ["gpu", "qat"]
    assert (
        "qat -dpdk-driver vfio-pci -kernel-vf-drivers c6xxvf,4xxxvf -max-num-devices 3" in container["args"]
    )
    for kind, name in ((DeviceKind.GPU, gpu), (DeviceKind.QAT, qat)):
        eventually(f"{name} status", functools.partial(status_matches, admin, kind, name, nodes))
        status = admin.get(cr_path(kind, name))["status"]
        assert status["controlledDaemonSet"]["name"] == "intel-device-plugins"
    assert get_or_none(admin, ds_path(DeviceKind.GPU, gpu)) is None

    # A DRADriver CR runs in the DRA drivers' own combined DaemonSet, under the drivers' ServiceAccount.
    sgx = unique("comb-sgx")
    dra_nodes = set(kwok_nodes(1, labels={TEST_LABEL: sgx}))
    crs(DeviceKind.SGX, sgx, {"nodeSelector": {TEST_LABEL: sgx}, "deployAs": "DRADriver"})
    dra = wait_daemonset_ready(admin, NS, "intel-dra-drivers", expected=1, timeout=120)
    dra_pod = dra["spec"]["template"]["spec"]
    (driver,) = dra_pod["containers"]
    assert driver["command"] == ["intel_dra_drivers"] and "sgx" in driver["args"]
    assert dra_pod["serviceAccountName"] == DRA_DRIVER_SA
    assert [r["name"] for r in dra["metadata"]["ownerReferences"]] == [sgx]
    eventually(f"{sgx} status", functools.partial(status_matches, admin, DeviceKind.SGX, sgx, dra_nodes))
    assert (
        admin.get(cr_path(DeviceKind.SGX, sgx))["status"]["controlledDaemonSet"]["name"]
        == "intel-dra-drivers"
    )
    assert len(admin.get(path)["metadata"]["ownerReferences"]) == 2, "the plugins' DaemonSet is unchanged"

    # every CR gone: the garbage collector removes the DaemonSets; then the per-kind operator leads again
    admin.delete(cr_path(DeviceKind.GPU, gpu))
    admin.delete(cr_path(DeviceKind.QAT, qat))
    admin.delete(cr_path(DeviceKind.SGX, sgx))
    eventually("the combined DaemonSet to go", lambda: get_or_none(admin, path) is None, timeout=60)
    dra_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/intel-dra-drivers"
    eventually("the DRA drivers' DaemonSet to go", lambda: get_or_none(admin, dra_path) is None, timeout=60)
    plain = installed.start_operator(unique("operator-d"))
    installed.route_webhooks_to(plain)
    combined.proc.stop()
    eventually("the per-kind operator to lead", lambda: installed.leader() == plain.name, timeout=15)


def test_api_server_restart_is_survived_and_reconciling_resumes(
    installed: Installed, admin: KubeClient, crs: Callable[..., JSON]
) -> None:
    (op,) = [o for o in installed.operators if o.proc.alive()]
    before = unique("before-restart")
    crs(DeviceKind.DSA, before, {"nodeSelector": {TEST_LABEL: before}})
    eventually("DSA DaemonSet", lambda: get_or_none(admin, ds_path(DeviceKind.DSA, before)))

    began = dt.datetime.now()  # local time, as the operator's log lines
    outage = installed.cp.restart_apiserver()
    installed.apiserver_restarts.append((began, dt.datetime.now()))
    print(f"kube-apiserver unreachable for {outage:.1f} s")
    admin.close()  # the old keep-alive connection went with the old process

    if not op.proc.alive():
        # With --leader-elect a replica that cannot renew within its deadline (8 s) exits 1 by design, and the
        # kubelet restarts it. Only accept that for an outage longer than the deadline.
        assert op.proc.popen.returncode == 1 and outage > 8.0, op.log()[-3000:]
        assert "lost lease" in op.log()
        op.restart()
        eventually("operator restarted", op.ready, timeout=60)

    # An existing CR's change and a new CR are both reconciled after the restart.
    admin.merge_patch(cr_path(DeviceKind.DSA, before), {"spec": {"logLevel": 9}})
    eventually(
        "spec change after restart",
        lambda: (
            "9"
            in admin.get(ds_path(DeviceKind.DSA, before))["spec"]["template"]["spec"]["containers"][0]["args"]
        ),
        timeout=60,
    )
    after = unique("after-restart")
    crs(DeviceKind.FPGA, after, {"nodeSelector": {TEST_LABEL: after}})
    eventually(
        "new CR after restart", lambda: get_or_none(admin, ds_path(DeviceKind.FPGA, after)), timeout=60
    )
    assert op.proc.alive()
