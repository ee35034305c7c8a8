"""The claim parameter policies (dra/admission.py) on the real API server: a claim or template whose
opaque parameters a driver would refuse at prepare is refused at creation, the field named; a valid one
is created. The policies are the ones deploy/dra ships, generated from the drivers' declarations
(tests/deploy checks they are current)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8stest.controlplane import ControlPlane
from k8stest.kubeclient import ApiError, KubeClient, wait_for

pytestmark = pytest.mark.k8s

POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims?dryRun=All"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates?dryRun=All"
GPU = "gpu.intel.com"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "dra"


def claim_spec(driver: str, parameters: object) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [{"name": "dev", "exactly": {"deviceClassName": driver}}],
            "config": [{"requests": ["dev"], "opaque": {"driver": driver, "parameters": parameters}}],
        }
    }


def claim(driver: str, parameters: object) -> dict[str, Any]:
    spec = claim_spec(driver, parameters)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": spec,
    }


def template(driver: str, parameters: object) -> dict[str, Any]:
    spec = {"spec": claim_spec(driver, parameters)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": spec,
    }


def gpu_config(**fields: object) -> dict[str, object]:
    return {"apiVersion": "gpu.intel.com/v1alpha1", "kind": "GpuConfig", **fields}


def refusal(client: KubeClient, path: str, obj: dict[str, Any]) -> str | None:
    """The API server's message refusing ``obj``, or None when it is admitted."""
    try:
        client.create(path, obj)
    except ApiError as error:
        assert error.status == 422, error
        return str(error)
    return None


@pytest.fixture(scope="module")
def policies(k8s_control_plane: ControlPlane) -> Iterator[KubeClient]:
    k8s_admin = k8s_control_plane.client()
    installed = [
        doc
        for kind in ("gpu", "fpga", "qat")
        for doc in yaml.safe_load_all((DEPLOY / kind / "deviceclasses" / "claim-parameters.yaml").read_text())
    ]
    for obj in installed:
        k8s_admin.create(POLICIES if obj["kind"] == "ValidatingAdmissionPolicy" else BINDINGS, obj)
    try:
        # In effect once the API server's policy cache has them; every policy is checked below.
        for driver, bad in (
            (GPU, gpu_config(byPath="some")),
            ("fpga.intel.com", {"afuId": "x/y"}),
            ("qat.intel.com", {}),
        ):
            wait_for(
                f"the {driver} claim parameter policy",
                functools.partial(refusal, k8s_admin, CLAIMS, claim(driver, bad)),
                timeout=30,
            )
        yield k8s_admin
    finally:
        for obj in installed:
            path = POLICIES if obj["kind"] == "ValidatingAdmissionPolicy" else BINDINGS
            k8s_admin.delete_if_present(f"{path}/{obj['metadata']['name']}")
        k8s_admin.close()


@pytest.mark.parametrize("make", [claim, template], ids=["claim", "template"])
@pytest.mark.parametrize(
    ("driver", "parameters", "message"),
    [
        (
            GPU,
            {"apiVersion": "gpu.intel.com/v1alpha1", "kind": "Other"},
            "apiVersion gpu.intel.com/v1alpha1 kind Other is not known to driver gpu.intel.com",
        ),
        (GPU, {"byPath": "none"}, "apiVersion  kind  is not known to driver gpu.intel.com"),
        (
            GPU,
            gpu_config(bypath="none"),
            "spec.devices.config[].opaque.parameters.bypath: unknown field of GpuConfig",
        ),
        (
            GPU,
            gpu_config(byPath="some"),
            "spec.devices.config[].opaque.parameters.byPath: must be a string, one of single, none, all",
        ),
        (GPU, gpu_config(byPath=1), "opaque.parameters.byPath: must be a string"),
        ("fpga.intel.com", {"afuId": "../etc"}, "opaque.parameters.afuId: must be a string, an AFU ID"),
        ("fpga.intel.com", {"afu": "00"}, "opaque.parameters.afu: unknown field of FpgaConfig"),
        (
            "qat.intel.com",
            {"x": 1},
            "spec.devices.config[].opaque: driver qat.intel.com accepts no opaque parameters",
        ),
    ],
)
def test_parameters_the_driver_would_refuse_are_refused_at_creation_naming_the_field(
    policies: KubeClient, make: Any, driver: str, parameters: object, message: str
) -> None:
    found = refusal(policies, TEMPLATES if make is template else CLAIMS, make(driver, parameters))
    assert found is not None and message in found, found


@pytest.mark.parametrize("make", [claim, template], ids=["claim", "template"])
@pytest.mark.parametrize(
    ("driver", "parameters"),
    [
        (GPU, gpu_config(byPath="all")),
        (GPU, gpu_config()),
        (
            "fpga.intel.com",
            {"apiVersion": "fpga.intel.com/v1alpha1", "kind": "FpgaConfig", "afuId": "d8424dc4-a4a3"},
        ),
        ("fpga.intel.com", {"afuId": "d8424dc4a4a3c413f89e433683f9040b"}),  # the deprecated bare form
        ("net.example.com", {"anything": True}),  # another driver's business
    ],
)
def test_valid_parameters_are_admitted(
    policies: KubeClient, make: Any, driver: str, parameters: object
) -> None:
    assert refusal(policies, TEMPLATES if make is template else CLAIMS, make(driver, parameters)) is None
