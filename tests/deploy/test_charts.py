"""The Helm charts render exactly what kustomize renders for the same choices, and only this project's images.

helm comes from tools/helm/build.sh (Go modules, cached outside the clone), kubectl from the Kubernetes test
binaries. Both are real: ``helm lint``, ``helm template`` and ``kubectl kustomize`` run here.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.operator import images
from intel_device_plugins.rmd import images as rmd_images

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
OPERATOR_CHART = CHARTS / "intel-device-plugins-operator"
CRS_CHART = CHARTS / "intel-device-plugins-crs"
RMD_CHART = CHARTS / "intel-rmd-operator"
DEPLOY = ROOT / "deploy" / "operator"
STANDALONE_WEBHOOKS = ROOT / "deploy" / "webhooks"
RMD = ROOT / "deploy" / "rmd"
# Environment values that name images (the operators deploy them).
IMAGE_ENVS = {images.PLUGIN_IMAGE_ENV, rmd_images.NODE_IMAGE_ENV}
NAMESPACE = "inteldeviceplugins-system"
Obj = dict[str, Any]


def _run(cmd: Sequence[str | Path]) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}:\n{proc.stderr}"
    return proc.stdout


def _objects(text: str) -> dict[tuple[str, str], Obj]:
    out: dict[tuple[str, str], Obj] = {}
    for doc in yaml.safe_load_all(text):
        if doc:
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in out, f"{key} rendered twice"
            out[key] = doc
    return out


def _template(
    helm: Path, chart: Path, *sets: str, namespace: str = NAMESPACE, values: Path | None = None
) -> dict[tuple[str, str], Obj]:
    args: list[str | Path] = [helm, "template", "idp", chart, "--namespace", namespace, "--include-crds"]
    if values is not None:
        args += ["--values", values]
    for s in sets:
        args += ["--set", s]
    return _objects(_run(args))


#: The operator chart has no default for the API server's sources (its NetworkPolicy fails closed); the
#: kustomize installs ship this documentation address, which admits nothing, in their place.
PLACEHOLDER_SOURCES = "networkPolicy.apiServerCIDRs={192.0.2.1/32}"


def _operator(helm: Path, *sets: str) -> dict[tuple[str, str], Obj]:
    """The operator chart with the kustomize installs' placeholder sources, then ``sets``."""
    return _template(helm, OPERATOR_CHART, PLACEHOLDER_SOURCES, *sets)


def _kustomize(kubectl: Path, directory: Path) -> dict[tuple[str, str], Obj]:
    return _objects(_run([kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", directory]))


def _diff(helm_objs: dict[tuple[str, str], Obj], kustomize_objs: dict[tuple[str, str], Obj]) -> list[str]:
    problems = [f"only in helm: {k}" for k in helm_objs.keys() - kustomize_objs.keys()]
    problems += [f"only in kustomize: {k}" for k in kustomize_objs.keys() - helm_objs.keys()]
    for key in sorted(helm_objs.keys() & kustomize_objs.keys()):
        if helm_objs[key] != kustomize_objs[key]:
            problems.append(
                f"{key} differs:\nhelm: {yaml.safe_dump(helm_objs[key])}\nkustomize: "
                f"{yaml.safe_dump(kustomize_objs[key])}"
            )
    return problems


# (helm --set values, kustomize directory) for the same installation choice.
CHOICES = {
    "cert-manager": ((), DEPLOY / "default"),
    "self-signed": (("certificates=self-signed",), DEPLOY / "self-signed"),
    "high-availability": (("highAvailability=true",), DEPLOY / "overlays" / "ha"),
    "gpu-only": (("devices={gpu}",), DEPLOY / "device" / "gpu"),
    "combined": (
        ("certificates=self-signed", "combinedPluginProcess=true"),
        DEPLOY / "overlays" / "combined",
    ),
}


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_operator_chart_renders_what_kustomize_renders(helm: Path, kubectl: Path, choice: str) -> None:
    sets, directory = CHOICES[choice]
    rendered = _operator(helm, "createNamespace=true", *sets)
    assert _diff(rendered, _kustomize(kubectl, directory)) == []


def test_network_policy_can_be_left_out(helm: Path, kubectl: Path) -> None:
    policy = ("NetworkPolicy", "intel-deviceplugins-controller-manager-ingress")
    kustomized = _kustomize(kubectl, DEPLOY / "default")
    without = _template(helm, OPERATOR_CHART, "createNamespace=true", "networkPolicy.enabled=false")
    assert policy in kustomized
    assert _diff(without, {k: v for k, v in kustomized.items() if k != policy}) == []


def test_charts_lint(helm: Path) -> None:
    for chart in (OPERATOR_CHART, CRS_CHART, RMD_CHART):
        _run(
            [
                helm,
                "lint",
                "--strict",
                chart,
                *(("--set", PLACEHOLDER_SOURCES) if chart == OPERATOR_CHART else ()),
            ]
        )
    _run([helm, "lint", "--strict", RMD_CHART, "--set", "createNamespace=true,nodeFeatureRule=true"])
    for choice in ("certificates=self-signed", "combinedPluginProcess=true"):
        _run([helm, "lint", "--strict", OPERATOR_CHART, "--set", f"{PLACEHOLDER_SOURCES},{choice}"])


def test_crs_chart_with_every_kind_renders_the_samples(helm: Path, kubectl: Path) -> None:
    kinds = ["dlb", "dsa", "fpga", "gpu", "iaa", "npu", "qat", "sgx"]
    rendered = _template(helm, CRS_CHART, *(f"plugins.{k}.enabled=true" for k in kinds))
    assert len(rendered) == len(kinds)
    assert _diff(rendered, _kustomize(kubectl, DEPLOY / "samples")) == []
    assert _template(helm, CRS_CHART) == {}


def _image_strings(objs: dict[tuple[str, str], Obj]) -> Iterator[str]:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    yield value
                elif key == "env" and isinstance(value, list):
                    yield from (e["value"] for e in value if e.get("name") in IMAGE_ENVS)
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    for obj in objs.values():
        if obj["kind"] != "CustomResourceDefinition":
            yield from walk(obj)


def test_defaults_reference_only_this_projects_images(helm: Path, kubectl: Path) -> None:
    expected = {images.operator_image(), images.node_image()}
    for objs in (
        _operator(helm),
        _kustomize(kubectl, DEPLOY / "default"),
        _kustomize(kubectl, DEPLOY / "self-signed"),
    ):
        assert set(_image_strings(objs)) == expected
    samples = set(_image_strings(_kustomize(kubectl, DEPLOY / "samples")))
    assert samples == {images.node_image()}
    for webhook in ("fpga", "sgx"):
        for overlay in ("default", "self-signed"):
            objs = _kustomize(kubectl, STANDALONE_WEBHOOKS / webhook / overlay)
            assert set(_image_strings(objs)) == {images.operator_image()}, f"{webhook}/{overlay}"
            (deployment,) = (o for o in objs.values() if o["kind"] == "Deployment")
            (container,) = deployment["spec"]["template"]["spec"]["containers"]
            assert container["command"] == [f"intel_{webhook}_admissionwebhook"]
            assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    rmd = _kustomize(kubectl, RMD / "default")
    assert set(_image_strings(rmd)) == {images.operator_image(), images.node_image()}
    (container,) = rmd[("Deployment", "intel-rmd-operator")]["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["command"]) == (
        images.operator_image(),
        [rmd_images.OPERATOR_COMMAND],
    )


def test_registry_and_tag_are_set_in_one_place(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    prefix, tag = "registry.example:5000/team", "9.9.9"
    want = {images.operator_image(prefix, tag), images.node_image(prefix, tag)}
    chart = _operator(helm, f"image.repository={prefix}", f"image.tag={tag}")
    assert set(_image_strings(chart)) == want
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    entries = [
        {"name": f"{images.DEFAULT_IMAGE_PREFIX}/{name}", "newName": f"{prefix}/{name}", "newTag": tag}
        for name in (images.OPERATOR_IMAGE_NAME, images.NODE_IMAGE_NAME)
    ]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [
                    os.path.relpath(DEPLOY / "default", overlay),
                    os.path.relpath(DEPLOY / "samples", overlay),
                ],
                "images": entries,
            }
        )
    )
    objs = _kustomize(kubectl, overlay)
    assert set(_image_strings(objs)) == want
    assert (
        chart[("Deployment", "intel-deviceplugins-controller-manager")]
        == objs[("Deployment", "intel-deviceplugins-controller-manager")]
    )


def test_chart_versions_follow_the_package() -> None:
    for chart in (OPERATOR_CHART, CRS_CHART, RMD_CHART):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["version"] == meta["appVersion"] == images.PROJECT_VERSION, chart
    for crd in (ROOT / "deploy" / "crds").rglob("*.yaml"):
        if crd.name != "kustomization.yaml":
            assert (OPERATOR_CHART / "crds" / crd.name).read_bytes() == crd.read_bytes(), crd.name
    crds = RMD / "crds"
    copies = sorted(p.name for p in (RMD_CHART / "crds").iterdir())
    assert copies == sorted(p.name for p in crds.glob("*.yaml") if p.name != "kustomization.yaml")
    for name in copies:
        assert (RMD_CHART / "crds" / name).read_bytes() == (crds / name).read_bytes(), name


# The RMD operator's own namespace (deploy/rmd names it; the chart takes the release namespace).
RMD_NAMESPACE = "intel-rmd"
RMD_OPERATOR = ("Deployment", "intel-rmd-operator")


def _rmd_template(helm: Path, *sets: str) -> dict[tuple[str, str], Obj]:
    return _template(helm, RMD_CHART, *sets, namespace=RMD_NAMESPACE)


def test_rmd_chart_renders_what_kustomize_renders(helm: Path, kubectl: Path) -> None:
    kustomized = _kustomize(kubectl, RMD / "default")
    assert _diff(_rmd_template(helm, "createNamespace=true"), kustomized) == []
    namespace = ("Namespace", RMD_NAMESPACE)
    without = {k: v for k, v in kustomized.items() if k != namespace}
    assert namespace in kustomized
    assert _diff(_rmd_template(helm), without) == []
    with_rule = _rmd_template(helm, "createNamespace=true", "nodeFeatureRule=true")
    assert _diff(with_rule, kustomized | _kustomize(kubectl, RMD / "nfd")) == []


def test_rmd_chart_follows_the_release_namespace(helm: Path) -> None:
    objs = _template(helm, RMD_CHART, "createNamespace=true", namespace="rmd-elsewhere")
    namespaced = [o for o in objs.values() if "namespace" in o["metadata"]]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"rmd-elsewhere"}
    assert ("Namespace", "rmd-elsewhere") in objs
    subjects = [s for o in objs.values() for s in o.get("subjects", [])]
    assert subjects and {s["namespace"] for s in subjects} == {"rmd-elsewhere"}


def test_rmd_chart_images_come_from_one_repository_and_tag(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    default = _rmd_template(helm)
    assert set(_image_strings(default)) == {images.operator_image(), images.node_image()}
    prefix, tag = "registry.example:5000/team", "9.9.9"
    chart = _rmd_template(helm, f"image.repository={prefix}/", f"image.tag={tag}", "image.pullPolicy=Always")
    (container,) = chart[RMD_OPERATOR]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == images.operator_image(prefix, tag)
    assert container["imagePullPolicy"] == "Always"
    (node_image,) = (e["value"] for e in container["env"] if e["name"] == rmd_images.NODE_IMAGE_ENV)
    assert node_image == images.node_image(prefix, tag)
    # The same rewrite through kustomize `images:` gives the same Deployment (but for the pull policy).
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    entries = [
        {"name": f"{images.DEFAULT_IMAGE_PREFIX}/{name}", "newName": f"{prefix}/{name}", "newTag": tag}
        for name in (images.OPERATOR_IMAGE_NAME, images.NODE_IMAGE_NAME)
    ]
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(RMD / "default", overlay)], "images": entries})
    )
    del container["imagePullPolicy"]
    assert chart[RMD_OPERATOR] == _kustomize(kubectl, overlay)[RMD_OPERATOR]
    secrets = _rmd_template(helm, "imagePullSecrets[0].name=pull")
    pod_spec = secrets[RMD_OPERATOR]["spec"]["template"]["spec"]
    assert pod_spec["imagePullSecrets"] == [{"name": "pull"}]


DRA_CHART = CHARTS / "intel-dra-driver"
DRA = ROOT / "deploy" / "dra"
DRA_KINDS = sorted(p.name for p in DRA.iterdir() if (p / "driver").is_dir())


def _dra_names(kind: str) -> tuple[str, tuple[str, str]]:
    """The kind's install namespace (also the name of its objects) and its DaemonSet key."""
    name = f"intel-{kind}-dra-driver"
    return name, ("DaemonSet", name)


def _dra_template(helm: Path, kind: str, *sets: str, namespace: str = "") -> dict[tuple[str, str], Obj]:
    return _template(helm, DRA_CHART, f"driver={kind}", *sets, namespace=namespace or _dra_names(kind)[0])


def _policy_user(objs: dict[tuple[str, str], Obj]) -> str:
    """The username the ResourceSlice admission policy restricts, read out of its match condition: a
    comparison with one string literal or a concatenation of several."""
    (policy,) = (
        o
        for o in objs.values()
        if o["kind"] == "ValidatingAdmissionPolicy"
        and not o["metadata"]["name"].endswith("-claim-parameters")
    )
    (condition,) = policy["spec"]["matchConditions"]
    prefix = "request.userInfo.username == "
    expression = str(condition["expression"])
    assert expression.startswith(prefix), expression
    parts = expression[len(prefix) :].split(" + ")
    assert all(len(p) >= 2 and p[0] == p[-1] == '"' and '"' not in p[1:-1] for p in parts), expression
    return "".join(p[1:-1] for p in parts)


def test_every_kind_has_a_dra_install() -> None:
    assert DRA_KINDS == ["dlb", "dsa", "fpga", "gpu", "iaa", "npu", "qat", "sgx"]


@pytest.mark.parametrize("kind", DRA_KINDS)
def test_dra_chart_renders_what_kustomize_renders(helm: Path, kubectl: Path, kind: str) -> None:
    kustomized = _kustomize(kubectl, DRA / kind)
    assert _diff(_dra_template(helm, kind, "createNamespace=true"), kustomized) == []
    classes = {k for k in kustomized if k[0] == "DeviceClass"}
    assert {k[0] for k in kustomized} - {"DeviceClass"} == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "DaemonSet",
    }
    assert all(name.endswith(f"{kind}.intel.com") for _, name in classes), classes
    # The cluster-wide part: the classes and the driver's claim parameter policy, left out together.
    policy = {k for k in kustomized if k[1] == f"{kind}.intel.com-claim-parameters"}
    assert {k[0] for k in policy} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    without = {k: v for k, v in kustomized.items() if k not in classes | policy}
    assert _diff(_dra_template(helm, kind, "createNamespace=true", "deviceClasses=false"), without) == []
    if (DRA / kind / "deviceclasses").is_dir():
        assert classes
        alone = _kustomize(kubectl, DRA / kind / "deviceclasses")
        assert set(alone) == classes | policy
        assert _diff(_dra_template(helm, kind, "createNamespace=true"), without | alone) == []


QAT_KERNEL = DRA / "qat" / "kernel"
QAT_KERNEL_VALUES = DRA_CHART / "values-qat-kernel.yaml"


def test_qat_kernel_mode_install_is_the_same_from_kustomize_and_helm(helm: Path, kubectl: Path) -> None:
    """deploy/dra/qat/kernel and the chart with values-qat-kernel.yaml: the same objects; the driver runs
    in kernel mode with none of DPDK mode's flags, writes only the shared directories, reads the host's
    /etc (away from its own) and adf_ctl, and ships kernel mode's classes instead of DPDK mode's."""
    kustomized = _kustomize(kubectl, QAT_KERNEL)
    name, daemonset = _dra_names("qat")
    helm_objs = _template(helm, DRA_CHART, "createNamespace=true", namespace=name, values=QAT_KERNEL_VALUES)
    assert _diff(helm_objs, kustomized) == []
    (container,) = kustomized[daemonset]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("-mode") + 1] == "kernel" and args[args.index("-config-dir") + 1] == "/host/etc"
    assert not {"-dpdk-driver", "-kernel-vf-drivers", "-max-num-devices"} & set(args), args
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
    read_only = {m["mountPath"] for m in container["volumeMounts"] if m.get("readOnly")}
    assert read_only == {"/sys", "/dev", "/host/etc", "/usr/local/bin/adf_ctl"}
    volumes = {v["name"]: v["hostPath"] for v in kustomized[daemonset]["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/host/etc"]] == {"path": "/etc", "type": "Directory"}
    assert volumes[mounts["/usr/local/bin/adf_ctl"]] == {"path": "/usr/local/bin/adf_ctl", "type": "File"}
    classes = {k[1] for k in kustomized if k[0] == "DeviceClass"}
    assert classes == {
        c["metadata"]["name"]
        for c in _kustomize(kubectl, QAT_KERNEL / "deviceclasses").values()
        if c["kind"] == "DeviceClass"
    }
    assert "cy1-dc0.qat.intel.com" in classes and "cy.qat.intel.com" not in classes
    # The DPDK install is unchanged by the kernel variant's values.
    assert _diff(_dra_template(helm, "qat", "createNamespace=true"), _kustomize(kubectl, DRA / "qat")) == []


GPU_HEALTH = DRA / "gpu" / "health"
GPU_HEALTH_VALUES = DRA_CHART / "values-gpu-health.yaml"


def test_gpu_health_install_is_the_same_from_kustomize_and_helm(helm: Path, kubectl: Path) -> None:
    """deploy/dra/gpu/health and the chart with values-gpu-health.yaml: the same objects; the driver
    watches xpumd (-m) through the host's /run/xpumd, mounted read-only, and writes nothing more."""
    kustomized = _kustomize(kubectl, GPU_HEALTH)
    name, daemonset = _dra_names("gpu")
    helm_objs = _template(helm, DRA_CHART, "createNamespace=true", namespace=name, values=GPU_HEALTH_VALUES)
    assert _diff(helm_objs, kustomized) == []
    (container,) = kustomized[daemonset]["spec"]["template"]["spec"]["containers"]
    assert container["args"][-1] == "-m"
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"] if m.get("readOnly")}
    volumes = {v["name"]: v["hostPath"] for v in kustomized[daemonset]["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/run/xpumd"]] == {"path": "/run/xpumd", "type": "DirectoryOrCreate"}
    # The plain install is unchanged, and watches nothing.
    plain = _kustomize(kubectl, DRA / "gpu")
    assert _diff(_dra_template(helm, "gpu", "createNamespace=true"), plain) == []
    (plain_container,) = plain[daemonset]["spec"]["template"]["spec"]["containers"]
    assert "-m" not in plain_container["args"]


def test_gpu_dra_install_has_its_classes(kubectl: Path) -> None:
    classes = {k for k in _kustomize(kubectl, DRA / "gpu") if k[0] == "DeviceClass"}
    assert classes == {
        ("DeviceClass", n) for n in ("gpu.intel.com", "i915.gpu.intel.com", "xe.gpu.intel.com")
    }


@pytest.mark.parametrize("kind", DRA_KINDS)
def test_dra_policy_restricts_the_drivers_own_service_account(helm: Path, kubectl: Path, kind: str) -> None:
    name, daemonset = _dra_names(kind)
    for objs in (
        _kustomize(kubectl, DRA / kind),
        _dra_template(helm, kind),
        _dra_template(helm, kind, namespace="dra-elsewhere"),
    ):
        pod = objs[daemonset]["spec"]["template"]["spec"]
        namespace = objs[daemonset]["metadata"]["namespace"]
        assert pod["serviceAccountName"] == name
        assert _policy_user(objs) == f"system:serviceaccount:{namespace}:{name}"
        (binding,) = (o for o in objs.values() if o["kind"] == "ClusterRoleBinding")
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        assert binding["roleRef"]["name"] == name and ("ClusterRole", name) in objs
        vap_bindings = [o for o in objs.values() if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert {b["spec"]["policyName"] for b in vap_bindings} == {
            f"{kind}.intel.com-claim-parameters",
            f"{name}-resourceslices",
        }
        assert all(b["spec"]["validationActions"] == ["Deny"] for b in vap_bindings)
        assert ("ValidatingAdmissionPolicy", f"{name}-resourceslices") in objs
        (container,) = pod["containers"]
        assert (container["name"], container["command"]) == (name, [f"intel_{kind}_dra_driver"])


@pytest.mark.parametrize("kind", DRA_KINDS)
def test_dra_drivers_write_only_where_their_kind_needs(kubectl: Path, kind: str) -> None:
    """Every driver reads /sys and /dev; QAT (DPDK mode binds VFs) also writes /sys/bus/pci, as its plugin
    does; only FPGA has an init container (the CRI hook), writing only /opt/intel/fpga-sw."""
    pod = _kustomize(kubectl, DRA / kind)[_dra_names(kind)[1]]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    shared = {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"}
    assert writable == shared | ({"/sys/bus/pci"} if kind == "qat" else set())
    read_only = {m["mountPath"] for m in container["volumeMounts"] if m.get("readOnly")}
    assert read_only == {"/sys", "/dev"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    inits = pod.get("initContainers", [])
    assert [i["name"] for i in inits] == (["intel-fpga-initcontainer"] if kind == "fpga" else [])
    for init in inits:
        assert init["command"] == ["intel_fpga_hook_install"]
        assert [m["mountPath"] for m in init["volumeMounts"]] == ["/opt/intel/fpga-sw"]
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_dra_chart_images_and_pod_values(helm: Path) -> None:
    assert set(_image_strings(_dra_template(helm, "fpga"))) == {images.node_image()}
    prefix, tag = "registry.example:5000/team", "9.9.9"
    objs = _dra_template(
        helm,
        "fpga",
        f"image.repository={prefix}/",
        f"image.tag={tag}",
        "image.pullPolicy=Always",
        "logLevel=4",
        "imagePullSecrets[0].name=pull",
        "tolerations[0].operator=Exists",
    )
    pod = objs[_dra_names("fpga")[1]]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert (container["image"], container["imagePullPolicy"]) == (images.node_image(prefix, tag), "Always")
    (init,) = pod["initContainers"]
    assert (init["image"], init["imagePullPolicy"]) == (images.node_image(prefix, tag), "Always")
    assert container["args"][:2] == ["-v", "4"]
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["tolerations"] == [{"operator": "Exists"}]


INTEL_EXTENDED = {"gpu": ("gpu.intel.com", "intel.com/gpu"), "qat": ("qat.intel.com", "intel.com/qat")}


@pytest.mark.parametrize("kind", sorted(INTEL_EXTENDED))
def test_dra_chart_opt_in_extended_resources_are_the_kustomize_component(
    helm: Path, kubectl: Path, kind: str, tmp_path: Path
) -> None:
    """``enableDRAExtendedResources`` (off by default, as in Intel's charts) puts Intel's resource on
    the class of Intel's name, exactly as ``deploy/dra/intel-extended-resources`` does; the project's
    own classes keep theirs, and no two classes map one resource."""
    class_name, resource = INTEL_EXTENDED[kind]
    default = _dra_template(helm, kind, "createNamespace=true")
    assert "extendedResourceName" not in default[("DeviceClass", class_name)]["spec"]
    enabled = _dra_template(helm, kind, "createNamespace=true", "enableDRAExtendedResources=true")
    assert enabled[("DeviceClass", class_name)]["spec"]["extendedResourceName"] == resource
    assert {k: v for k, v in enabled.items() if k != ("DeviceClass", class_name)} == {
        k: v for k, v in default.items() if k != ("DeviceClass", class_name)
    }
    mapped = [
        o["spec"]["extendedResourceName"]
        for o in enabled.values()
        if "extendedResourceName" in o.get("spec", {})
    ]
    assert len(mapped) == len(set(mapped)), mapped
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(DRA / kind, tmp_path)}\n"
        f"components:\n- {os.path.relpath(DRA / 'intel-extended-resources', tmp_path)}\n"
    )
    assert _diff(enabled, _kustomize(kubectl, tmp_path)) == []


def test_dra_chart_healthcheck_port_sets_the_flag_and_the_probes(helm: Path) -> None:
    def container(*sets: str) -> Obj:
        pod = _dra_template(helm, "dsa", *sets)[_dra_names("dsa")[1]]["spec"]["template"]["spec"]
        (found,) = pod["containers"]
        return dict(found)

    default = container()
    args = default["args"]
    assert args[args.index("-healthcheck-port") + 1] == "51516"
    assert (
        default["livenessProbe"]["grpc"]
        == default["startupProbe"]["grpc"]
        == {
            "port": 51516,
            "service": "liveness",
        }
    )
    moved = container("healthcheckPort=9000")
    assert moved["args"][moved["args"].index("-healthcheck-port") + 1] == "9000"
    assert moved["livenessProbe"]["grpc"]["port"] == moved["ports"][0]["containerPort"] == 9000
    off = container("healthcheckPort=-1")
    assert off["args"][off["args"].index("-healthcheck-port") + 1] == "-1"
    assert not {"livenessProbe", "startupProbe", "ports"} & set(off)


def test_dra_chart_refuses_an_unknown_driver(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "template", "x", str(DRA_CHART), "--set", "driver=tpu"], capture_output=True, text=True
    )
    assert proc.returncode != 0 and 'driver: "tpu" is not one of dlb, dsa, fpga' in proc.stderr


def test_dra_chart_lints_and_follows_the_package(helm: Path) -> None:
    for kind in DRA_KINDS:
        _run([helm, "lint", "--strict", DRA_CHART, "--set", f"driver={kind}"])
    meta = yaml.safe_load((DRA_CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == images.PROJECT_VERSION


@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_operator_installs_restrict_the_dra_drivers_service_account(
    helm: Path, kubectl: Path, choice: str
) -> None:
    """The policy names, in CEL that kustomize does not rewrite, the ServiceAccount the operator gives the
    DRA driver pods; every shipped installation (and the chart in another namespace) must agree."""
    installs = [_kustomize(kubectl, CHOICES[choice][1])]
    if choice == "cert-manager":
        installs.append(_template(helm, OPERATOR_CHART, PLACEHOLDER_SOURCES, namespace="elsewhere"))
    for objs in installs:
        (manager,) = (o for o in objs.values() if o["kind"] == "Deployment")
        env = {e["name"]: e.get("value") for e in manager["spec"]["template"]["spec"]["containers"][0]["env"]}
        account = env["DRA_DRIVER_SERVICE_ACCOUNT"]
        namespace = manager["metadata"]["namespace"]
        assert ("ServiceAccount", account) in objs
        assert _policy_user(objs) == f"system:serviceaccount:{namespace}:{account}"
        binding = objs[("ClusterRoleBinding", account)]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        (vap_binding,) = (o for o in objs.values() if o["kind"] == "ValidatingAdmissionPolicyBinding")
        assert ("ValidatingAdmissionPolicy", vap_binding["spec"]["policyName"]) in objs
