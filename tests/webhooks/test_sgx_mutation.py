"""SGX pod mutation: every patch, every message, reinvocation."""

from __future__ import annotations

from typing import Any

from intel_device_plugins.webhooks import sgx
from intel_device_plugins.webhooks.handlers import sgx_review
from intel_device_plugins.webhooks.jsonpatch import apply
from tests.webhooks.podfixtures import patch_of, pod, review, with_resources

EPC = "sgx.intel.com/epc"


def ops_for(p: dict[str, Any]) -> list[dict[str, Any]]:
    answer = dict(sgx_review(review(p)))
    assert answer["response"]["allowed"], answer
    return patch_of(answer)


def mutated(p: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = apply(p, ops_for(p))
    return out


def test_epc_user_gets_enclave_and_annotation() -> None:
    p = pod(with_resources("app", {EPC: "1Mi"}))
    assert ops_for(p) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"sgx.intel.com/epc": "1Mi"}},
        {"op": "add", "path": "/spec/containers/0/resources/limits/sgx.intel.com~1enclave", "value": "1"},
        {"op": "add", "path": "/spec/containers/0/resources/requests/sgx.intel.com~1enclave", "value": "1"},
    ]


def test_pod_without_epc_is_left_alone() -> None:
    assert ops_for(pod(with_resources("app", {"cpu": "1"}))) == []
    assert ops_for(pod(with_resources("app", {"cpu": "1"}), annotations={})) == []


def test_quote_provider_container_gets_provision() -> None:
    p = pod(
        with_resources("app", {EPC: "512Ki"}),
        with_resources("qe", {EPC: "512Ki"}),
        annotations={"sgx.intel.com/quote-provider": "qe"},
    )
    out = mutated(p)
    assert out["metadata"]["annotations"] == {
        "sgx.intel.com/quote-provider": "qe",
        "sgx.intel.com/epc": "1Mi",
    }
    app, qe = out["spec"]["containers"]
    assert app["resources"]["limits"] == {EPC: "512Ki", "sgx.intel.com/enclave": "1"}
    assert qe["resources"]["limits"] == {
        EPC: "512Ki",
        "sgx.intel.com/enclave": "1",
        "sgx.intel.com/provision": "1",
    }
    assert qe["resources"]["requests"] == qe["resources"]["limits"]
    assert "volumes" not in out["spec"] and "env" not in app


def test_aesmd_sidecar_gets_memory_socket_volume() -> None:
    p = pod(
        with_resources("app", {EPC: "1Mi"}),
        with_resources("aesmd", {EPC: "2Mi"}),
        annotations={"sgx.intel.com/quote-provider": "aesmd"},
    )
    out = mutated(p)
    assert out["metadata"]["annotations"]["sgx.intel.com/epc"] == "3Mi"
    assert out["spec"]["volumes"] == [{"name": "aesmd-socket", "emptyDir": {"medium": "Memory"}}]
    for c in out["spec"]["containers"]:
        assert c["volumeMounts"] == [{"name": "aesmd-socket", "mountPath": "/var/run/aesmd"}]
        assert c["env"] == [{"name": "SGX_AESM_ADDR", "value": "1"}]
    assert "sgx.intel.com/provision" in out["spec"]["containers"][1]["resources"]["limits"]
    assert "sgx.intel.com/provision" not in out["spec"]["containers"][0]["resources"]["limits"]


def test_aesmd_on_the_host_gets_host_path() -> None:
    p = pod(with_resources("app", {EPC: "1Mi"}), annotations={"sgx.intel.com/quote-provider": "aesmd"})
    out = mutated(p)
    assert out["spec"]["volumes"] == [
        {"name": "aesmd-socket", "hostPath": {"path": "/var/run/aesmd", "type": "DirectoryOrCreate"}}
    ]


def test_existing_mount_and_volume_are_kept() -> None:
    c = with_resources("app", {EPC: "1Mi"}, volumeMounts=[{"name": "mine", "mountPath": "/var/run/aesmd"}])
    p = pod(c, annotations={"sgx.intel.com/quote-provider": "aesmd"})
    p["spec"]["volumes"] = [{"name": "aesmd-socket", "emptyDir": {}}]
    out = mutated(p)
    assert out["spec"]["volumes"] == [{"name": "aesmd-socket", "emptyDir": {}}]
    assert out["spec"]["containers"][0]["volumeMounts"] == [{"name": "mine", "mountPath": "/var/run/aesmd"}]


def test_user_aesm_addr_is_overridden_by_appending() -> None:
    c = with_resources("app", {EPC: "1Mi"}, env=[{"name": "SGX_AESM_ADDR", "value": "0"}])
    out = mutated(pod(c, annotations={"sgx.intel.com/quote-provider": "aesmd"}))
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "SGX_AESM_ADDR", "value": "0"},
        {"name": "SGX_AESM_ADDR", "value": "1"},
    ]


def test_reinvocation_changes_nothing() -> None:
    p = pod(
        with_resources("app", {EPC: "1Mi"}),
        with_resources("aesmd", {EPC: "1Mi"}),
        annotations={"sgx.intel.com/quote-provider": "aesmd"},
    )
    once = mutated(p)
    assert ops_for(once) == []
    assert sgx.mutated_pod(once) == once


def test_epc_annotation_is_overwritten() -> None:
    p = pod(with_resources("app", {EPC: "4Mi"}), annotations={"sgx.intel.com/epc": "1Ki"})
    assert mutated(p)["metadata"]["annotations"] == {"sgx.intel.com/epc": "4Mi"}


def test_odd_epc_sizes_print_as_the_api_does() -> None:
    out = mutated(pod(with_resources("a", {EPC: "1536"}), with_resources("b", {EPC: "1k"})))
    assert out["metadata"]["annotations"]["sgx.intel.com/epc"] == "2536"


def test_sgx_messages() -> None:
    c = {"name": "c", "resources": {"limits": {EPC: "1Mi"}, "requests": {EPC: "2Mi"}}}
    answer = sgx_review(review(pod(c)))["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"] == (
        "'limits' and 'requests' for \"sgx.intel.com/epc\" must be equal as extended resources cannot be "
        "overcommitted"
    )
    c = {"name": "c", "resources": {"limits": {EPC: "0.5"}, "requests": {EPC: "0.5"}}}
    assert sgx_review(review(pod(c)))["response"]["status"]["message"] == (
        'resource quantity isn\'t of integral type for "sgx.intel.com/epc"'
    )
