"""``deploy/dra/<kind>`` for every kind on a real API server: each driver's ServiceAccount, with a token
bound to a pod on node A, writes A's ResourceSlices and no other node's (the ValidatingAdmissionPolicy), and
its ClusterRole allows the calls the driver makes and nothing else; so does the operator's driver identity."""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from k8stest.binaries import Binaries, repo_root
from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, Credentials, KubeClient, wait_for
from k8stest.operatorinstall import Kubectl

pytestmark = pytest.mark.k8s

KINDS = ("dlb", "dsa", "fpga", "gpu", "iaa", "npu", "qat", "sgx")
# Each standalone install names its namespace and ServiceAccount intel-<kind>-dra-driver.
# The operator installation's one identity for every kind's driver (deploy/operator/rbac/dra_driver.yaml).
OPERATOR_NAMESPACE = "inteldeviceplugins-system"
OPERATOR_ACCOUNT = "intel-deviceplugins-dra-driver"
IDENTITIES = {kind: (f"intel-{kind}-dra-driver",) * 2 for kind in KINDS} | {
    "operator": (OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
}
NAMESPACE, ACCOUNT = IDENTITIES["gpu"]
DRIVER = "gpu.intel.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
JSON = dict[str, Any]


def rendered(kubectl: Kubectl, *path: str) -> list[JSON]:
    root = repo_root()
    assert root is not None, "deploy/ is only in a checkout"
    out = kubectl("kustomize", str(root.joinpath("deploy", *path))).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def operator_driver_objects(kubectl: Kubectl) -> list[JSON]:
    """What the operator installation ships for its GPU DRA driver pods."""
    return [d for d in rendered(kubectl, "operator", "default") if "dra-driver" in d["metadata"]["name"]]


def slice_for(name: str, node: str | None, driver: str = DRIVER) -> JSON:
    spec: JSON = {
        "driver": driver,
        "pool": {"name": node or "cluster", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "card0"}],
    }
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def denied(call: Callable[[], object]) -> str:
    """The API server's message for a call that must be forbidden."""
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == 403, info.value
    body = info.value.body
    return str(body.get("message", body) if isinstance(body, dict) else body)


@pytest.fixture(scope="module")
def installed(k8s_binaries: Binaries, k8s_control_plane: ControlPlane) -> Iterator[list[JSON]]:
    """Everything but the DaemonSet applied once for the module (the tests bind tokens to pods of their
    own); the DaemonSet is checked by the API server's validation only."""
    kubectl = Kubectl(k8s_binaries.path("kubectl"), k8s_control_plane.admin_kubeconfig)
    admin = k8s_control_plane.client()
    docs = [d for kind in KINDS for d in rendered(kubectl, "dra", kind)]
    others = [d for d in docs if d["kind"] != "DaemonSet"]
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]

    # The operator's namespace may be another test module's too: created if missing, never deleted here;
    # one that module's teardown left terminating is waited out first.
    def usable() -> bool:
        try:
            ns = admin.get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}")
        except ApiError as e:
            return e.status == 404
        return "deletionTimestamp" not in ns["metadata"]

    wait_for(f"namespace {OPERATOR_NAMESPACE} to be usable", usable, timeout=120)
    admin.apply_ok(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
    )
    text = yaml.safe_dump_all(others + operator_driver_objects(kubectl))
    kubectl("apply", "-f", "-", stdin=text)
    try:
        kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(daemonsets))
        yield docs
    finally:
        for s in admin.get(SLICES)["items"]:
            if s["spec"]["driver"].endswith(".intel.com"):
                admin.delete_if_present(f"{SLICES}/{s['metadata']['name']}")
        for pod in admin.get(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods")["items"]:
            if pod["spec"].get("serviceAccountName") == OPERATOR_ACCOUNT:
                admin.delete_if_present(
                    f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{pod['metadata']['name']}"
                )
        kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=text, check=False)
        admin.close()


def pod_on(admin: KubeClient, name: str, node: str, identity: tuple[str, str] = IDENTITIES["gpu"]) -> JSON:
    """A pod of the driver's ServiceAccount bound to ``node`` (kwok runs it)."""
    namespace, account = identity
    return admin.create(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "serviceAccountName": account,
                "nodeName": node,
                "containers": [{"name": "driver", "image": "driver"}],
            },
        },
    )


def token_client(
    cp: ControlPlane,
    admin: KubeClient,
    pod: JSON | None,
    identity: tuple[str, str] = IDENTITIES["gpu"],
) -> KubeClient:
    """The driver's ServiceAccount with a token bound to ``pod`` (as the kubelet mounts it), or unbound."""
    namespace, account = identity
    spec: JSON = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
    resp = admin.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return KubeClient(Credentials(cp.server, cp.pki.ca_pem, str(resp["status"]["token"])))


@pytest.mark.parametrize("install", sorted(IDENTITIES))
def test_each_driver_writes_only_its_own_nodes_slices(
    installed: list[JSON],
    k8s_control_plane: ControlPlane,
    k8s_admin: KubeClient,
    kwok_nodes: Callable[..., list[str]],
    install: str,
) -> None:
    identity = IDENTITIES[install]
    kind_driver = f"{install if install in KINDS else 'qat'}.intel.com"
    kind_slice = functools.partial(slice_for, driver=kind_driver)

    node_a, node_b = kwok_nodes(2)
    pod = pod_on(k8s_admin, f"driver-a-{install}", node_a, identity)
    driver = token_client(k8s_control_plane, k8s_admin, pod, identity)
    try:
        review = driver.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        user = review["status"]["userInfo"]
        assert user["username"] == "system:serviceaccount:{}:{}".format(*identity)
        assert user["extra"]["authentication.kubernetes.io/node-name"] == [node_a]

        # The policy takes effect once the API server's policy cache has it: until then B's slice is created.
        def b_denied() -> str | None:
            try:
                driver.create(SLICES, kind_slice(f"probe-b-{install}", node_b))
            except ApiError as e:
                return str(e.body) if e.status == 403 else None

            k8s_admin.delete(f"{SLICES}/probe-b-{install}")
            return None

        assert f"may not write the ResourceSlices of node '{node_b}'" in wait_for(
            "the ResourceSlice policy", b_denied, timeout=30
        )
        assert "ResourceSlices of no node" in denied(
            lambda: driver.create(SLICES, kind_slice(f"everywhere-{install}", None))
        )
        # Only its own driver name(s), even on its own node: every kind's for the operator's one identity.
        own_drivers = [f"{k}.intel.com" for k in KINDS] if install == "operator" else [kind_driver]
        foreign = (
            "gpu.example.com"
            if install == "operator"
            else ("npu" if install == "gpu" else "gpu") + ".intel.com"
        )
        assert f"may not write the ResourceSlices of driver '{foreign}'" in denied(
            lambda: driver.create(SLICES, slice_for(f"foreign-{install}", node_a, driver=foreign))
        )
        for i, name in enumerate(own_drivers):
            driver.create(SLICES, slice_for(f"mine-{install}-{i}", node_a, driver=name))
            driver.delete(f"{SLICES}/mine-{install}-{i}")

        own_name, own2, other_name = f"own-a-{install}", f"own-a2-{install}", f"other-b-{install}"
        own = driver.create(SLICES, kind_slice(own_name, node_a))
        own["spec"]["devices"].append({"name": "card1"})
        driver.request("PUT", f"{SLICES}/{own_name}", own)
        driver.merge_patch(f"{SLICES}/{own_name}", {"metadata": {"labels": {"patched": "yes"}}})
        k8s_admin.create(SLICES, kind_slice(other_name, node_b))
        other = driver.get(f"{SLICES}/{other_name}")  # reading is not restricted
        other["spec"]["devices"] = []
        assert node_b in denied(lambda: driver.request("PUT", f"{SLICES}/{other_name}", other))
        assert node_b in denied(
            lambda: driver.merge_patch(f"{SLICES}/{other_name}", {"metadata": {"labels": {"x": "y"}}})
        )
        assert node_b in denied(lambda: driver.delete(f"{SLICES}/{other_name}"))
        # A collection delete is admitted object by object: B's slice survives one without a selector.
        with pytest.raises(ApiError):
            driver.delete(SLICES)
        assert k8s_admin.get(f"{SLICES}/{other_name}")["spec"]["nodeName"] == node_b
        selector = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node_a}"})
        driver.create(SLICES, kind_slice(own2, node_a))
        driver.delete(f"{SLICES}?{selector}")
        names = {s["metadata"]["name"] for s in k8s_admin.get(SLICES)["items"]}
        assert own2 not in names and own_name not in names and other_name in names
    finally:
        driver.close()


def test_token_bound_to_no_pod_writes_no_slice(
    installed: list[JSON],
    k8s_control_plane: ControlPlane,
    k8s_admin: KubeClient,
    kwok_nodes: Callable[..., list[str]],
) -> None:
    (node,) = kwok_nodes(1)
    bound = token_client(k8s_control_plane, k8s_admin, pod_on(k8s_admin, "driver-bound", node))
    unbound = token_client(k8s_control_plane, k8s_admin, None)
    try:
        # Wait for the policy through the bound token, whose other-node write it must deny.
        def active() -> bool | None:
            try:
                bound.create(SLICES, slice_for("probe", f"{node}-elsewhere"))
            except ApiError as e:
                return True if e.status == 403 else None
            k8s_admin.delete(f"{SLICES}/probe")
            return None

        wait_for("the ResourceSlice policy", active, timeout=30)
        assert "bound to a pod on a node" in denied(
            lambda: unbound.create(SLICES, slice_for("unbound", node))
        )
    finally:
        bound.close()
        unbound.close()


def allowed(client: KubeClient, verb: str, group: str, resource: str, namespace: str = "") -> bool:
    attributes = {"verb": verb, "group": group, "resource": resource}
    if namespace:
        attributes["namespace"] = namespace
    review = client.create(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review["status"]["allowed"])


@pytest.mark.parametrize("install", sorted(IDENTITIES))
def test_each_cluster_role_allows_the_drivers_calls_and_no_more(
    installed: list[JSON],
    k8s_control_plane: ControlPlane,
    k8s_admin: KubeClient,
    kwok_nodes: Callable[..., list[str]],
    install: str,
) -> None:
    identity = IDENTITIES[install]
    own_namespace = identity[0]
    (node,) = kwok_nodes(1)
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    k8s_admin.create(
        claims,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"dra-deploy-claim-{install}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        },
    )
    driver = token_client(
        k8s_control_plane, k8s_admin, pod_on(k8s_admin, f"driver-rbac-{install}", node, identity), identity
    )
    try:
        # The calls the driver makes: its Node (owner of its slices), its slices listed and watched by
        # node and driver, and the claims the kubelet names.
        assert driver.get(f"/api/v1/nodes/{node}")["metadata"]["name"] == node
        selector = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node},spec.driver={DRIVER}"})
        listed = driver.get(f"{SLICES}?{selector}")
        version = listed["metadata"]["resourceVersion"]
        driver.get(f"{SLICES}?{selector}&watch=1&timeoutSeconds=1&resourceVersion={version}")
        claim = f"dra-deploy-claim-{install}"
        assert driver.get(f"{claims}/{claim}")["metadata"]["name"] == claim
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"):
            assert allowed(driver, verb, "resource.k8s.io", "resourceslices"), verb
        # Events on its node when a device turns unhealthy or recovers (they live in "default").
        assert allowed(driver, "create", "", "events", "default")
        # And nothing more.
        for verb, group, resource, namespace in (
            ("list", "resource.k8s.io", "resourceclaims", "default"),
            ("watch", "resource.k8s.io", "resourceclaims", "default"),
            ("create", "resource.k8s.io", "resourceclaims", "default"),
            ("update", "resource.k8s.io", "resourceclaims", "default"),
            ("patch", "resource.k8s.io", "resourceclaims/status", "default"),
            ("create", "resource.k8s.io", "deviceclasses", ""),
            ("update", "resource.k8s.io", "deviceclasses", ""),
            ("create", "resource.k8s.io", "resourceclaimtemplates", "default"),
            ("list", "", "nodes", ""),
            ("patch", "", "nodes", ""),
            ("get", "", "pods", own_namespace),
            ("get", "", "secrets", own_namespace),
            ("list", "", "configmaps", own_namespace),
            ("get", "", "events", "default"),
            ("list", "", "events", "default"),
            ("update", "", "events", "default"),
            ("delete", "", "events", "default"),
        ):
            assert not allowed(driver, verb, group, resource, namespace), (verb, group, resource)
        denied(lambda: driver.get(claims))
    finally:
        driver.close()
        k8s_admin.delete_if_present(f"{claims}/dra-deploy-claim-{install}")


def test_device_classes_map_the_plugins_extended_resources(
    installed: list[JSON], k8s_admin: KubeClient
) -> None:
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    assert k8s_admin.get(f"{classes}/gpu.intel.com")["spec"].get("extendedResourceName") is None
    for driver in ("i915", "xe"):
        spec = k8s_admin.get(f"{classes}/{driver}.gpu.intel.com")["spec"]
        assert spec["extendedResourceName"] == f"gpu.intel.com/{driver}"
        (selector,) = spec["selectors"]
        assert f'.driver == "{driver}"' in selector["cel"]["expression"]


def test_device_classes_of_every_kind_are_on_the_server(installed: list[JSON], k8s_admin: KubeClient) -> None:
    """Every shipped class passed the API server's validation; each kind's install has its own objects."""
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    shipped = [d for d in installed if d["kind"] == "DeviceClass"]
    assert len(shipped) > 3
    for cls in shipped:
        on_server = k8s_admin.get(f"{classes}/{cls['metadata']['name']}")
        assert on_server["spec"]["selectors"] == cls["spec"]["selectors"]
        assert on_server["spec"].get("extendedResourceName") == cls["spec"].get("extendedResourceName")
    per_kind = sorted(d["kind"] for d in installed if d["metadata"]["name"] == "intel-qat-dra-driver")
    assert per_kind == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    )
