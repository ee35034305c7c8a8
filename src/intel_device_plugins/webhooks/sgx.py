"""SGX pod mutation: an ``sgx.intel.com/epc`` request becomes the enclave (and provision) resources, the aesmd
socket and the EPC annotation.

``mutated_pod`` returns the pod as it should be; ``mutate_pod`` returns the JSON patch from the pod to that.
Applying it to its own result changes nothing, which is what ``reinvocationPolicy: IfNeeded`` needs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from intel_device_plugins.webhooks.jsonpatch import Op, diff
from intel_device_plugins.webhooks.pod import JSON, requested
from intel_device_plugins.webhooks.quantity import binary_si

PREFIX: Final = "sgx.intel.com/"
EPC: Final = "sgx.intel.com/epc"
ENCLAVE: Final = "sgx.intel.com/enclave"
PROVISION: Final = "sgx.intel.com/provision"
QUOTE_PROVIDER_ANNOTATION: Final = "sgx.intel.com/quote-provider"
EPC_ANNOTATION: Final = EPC
AESMD: Final = "aesmd"
AESMD_VOLUME: Final = "aesmd-socket"
AESMD_PATH: Final = "/var/run/aesmd"
AESM_ADDR_ENV: Final = "SGX_AESM_ADDR"


def _set_one(container: JSON, resource: str) -> None:
    res = container.setdefault("resources", {})
    for part in ("limits", "requests"):
        if not isinstance(res.get(part), dict):
            res[part] = {}
        res[part][resource] = "1"


def _wire_aesmd(container: JSON) -> None:
    mounts = container.setdefault("volumeMounts", [])
    if not any(m.get("mountPath") == AESMD_PATH for m in mounts):
        mounts.append({"name": AESMD_VOLUME, "mountPath": AESMD_PATH})
    env = container.setdefault("env", [])
    # The last entry of a name wins in a container; add ours only when it is not already the effective one.
    current = [e for e in env if e.get("name") == AESM_ADDR_ENV]
    if not current or current[-1] != {"name": AESM_ADDR_ENV, "value": "1"}:
        env.append({"name": AESM_ADDR_ENV, "value": "1"})


def mutated_pod(pod: Mapping[str, Any]) -> JSON:
    """The pod with the changes of docs/webhooks.md, "SGX mutation", applied.

    Denied (from ``requested``) for bad SGX quantities.
    """
    out: JSON = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    quote_provider = annotations.get(QUOTE_PROVIDER_ANNOTATION, "")
    total_epc = 0
    epc_users = 0
    aesmd_present = False
    spec = out.setdefault("spec", {})
    for container in spec.get("containers") or []:
        epc = requested(container, PREFIX).get(EPC)
        if epc is None:
            continue
        total_epc += epc
        if quote_provider == container.get("name"):
            _set_one(container, PROVISION)
        _set_one(container, ENCLAVE)
        epc_users += 1
        if quote_provider == AESMD:
            _wire_aesmd(container)
            aesmd_present = aesmd_present or container.get("name") == AESMD
    volumes = spec.get("volumes") or []
    if quote_provider == AESMD and epc_users and not any(v.get("name") == AESMD_VOLUME for v in volumes):
        if aesmd_present and epc_users >= 2:  # aesmd runs as a sidecar: the socket lives in the pod
            source: JSON = {"emptyDir": {"medium": "Memory"}}
        else:
            source = {"hostPath": {"path": AESMD_PATH, "type": "DirectoryOrCreate"}}
        spec["volumes"] = [*volumes, {"name": AESMD_VOLUME, **source}]
    if total_epc:
        annotations[EPC_ANNOTATION] = binary_si(total_epc)
        meta["annotations"] = annotations
    return out


def mutate_pod(pod: Mapping[str, Any]) -> list[Op]:
    return diff(pod, mutated_pod(pod))
