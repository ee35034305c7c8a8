#!/usr/bin/env bash
# Re-pin the test-infrastructure modules to one Kubernetes release: test/k8s (control plane and
# device-manager harness) and test/node (the real node's kubelet).
#
# Why a script: k8s.io/kubernetes requires its staging modules at the fake version v0.0.0 and
# replaces them with ./staging paths. Replaces in a dependency are ignored, so this module must
# repeat every replace, pointing at the published v0.Y.Z tag. We read the list from the pinned
# release's own go.mod (via the module proxy) instead of typing it by hand, so a new release that
# adds a staging module cannot be missed.
#
# Usage: test/k8s/hack/pin-kubernetes.sh v1.36.3
set -euo pipefail
K8S_VERSION="${1:?usage: $0 vX.Y.Z}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

gomod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
[[ -f "$gomod" ]] || { echo "cannot find go.mod of k8s.io/kubernetes@${K8S_VERSION}" >&2; exit 1; }

go_line="$(sed -n 's/^go \(.*\)$/\1/p' "$gomod")"
godebug_line="$(sed -n 's/^godebug \(.*\)$/\1/p' "$gomod")"

rm -f go.mod go.sum
go mod init intel-device-plugins/test/k8s >/dev/null 2>&1
go mod edit -go="$go_line"
[[ -n "$godebug_line" ]] && go mod edit -godebug="$godebug_line"
go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
sed -n 's#^\t\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*$#\1#p' "$gomod" | while read -r mod; do
    go mod edit -replace="${mod}=${mod}@${STAGING_VERSION}"
done
# Tool directives keep `go mod tidy` aware of the main packages we build (they cannot be imported).
for tool in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    go get -tool "k8s.io/kubernetes/cmd/${tool}@${K8S_VERSION}"
done
etcd_version="$(sed -n 's#^\tgo.etcd.io/etcd/server/v3 \(v[^ ]*\).*$#\1#p' "$gomod")"
go get -tool "go.etcd.io/etcd/server/v3@${etcd_version}"
go mod tidy

# The node's module is this one with the kubelet as its only tool: starting from the same go.mod
# pins every module both share at the same version, which keeps the kubelet the control plane's
# release and lets Go's build cache compile each shared package once (docs/node.md).
cp go.mod go.sum ../node/
(
    cd ../node
    go mod edit -module=intel-device-plugins/test/node
    for tool in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
        go mod edit -droptool="k8s.io/kubernetes/cmd/${tool}"
    done
    go mod edit -droptool=go.etcd.io/etcd/server/v3
    go get -tool "k8s.io/kubernetes/cmd/kubelet@${K8S_VERSION}"
    go mod tidy
)
echo "pinned k8s.io/kubernetes ${K8S_VERSION} (staging ${STAGING_VERSION}, etcd ${etcd_version}, go ${go_line})"
