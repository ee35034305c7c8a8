#!/usr/bin/env bash
# Build (or reuse) what a real Kubernetes node in the test tier runs: the kubelet, built from the
# same Kubernetes release as the control plane (test/k8s); containerd 2 with its runc shim and ctr,
# built from their Go module (test/node/runtime); runc, the CNI plugins and a static busybox from
# the distribution's packages.
#
# Prints the directory holding kubelet, containerd, containerd-shim-runc-v2, ctr, runc, busybox and
# cni/ (the plugin directory) on the last line of stdout; all progress goes to stderr.
#
# Why a module of its own (test/node/go.mod) instead of test/k8s: the kubelet needs packages
# (cadvisor, libcontainer's cgroup code, …) that test/k8s does not list, and adding them there would
# change that module's cache key and rebuild every control-plane binary. The two modules pin the
# same versions of every shared module, so Go's build cache compiles each shared package once.
# containerd has a module of its own for the same reason the other way round: its grpc and otel pins
# stay out of the Kubernetes build graph.
#
# Environment: NODE_BIN_CACHE (cache root), BUILD_JOBS (go build -p, default 2), K8S_BUILD_NICE
# (nice level, default 10), NODE_BUILD_NO_LINK=1 (leave the test/node/bin symlink alone),
# NODE_NO_APT=1 (never call apt-get; fail if a package is missing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

log() { echo "[node-build] $*" >&2; }

# Distribution packages: executable → package. Debian 12's runc 1.1.5 serves containerd 2 here
# (docs/node.md says why no newer one is built).
declare -A packages=(
    [/usr/sbin/runc]=runc
    [/usr/lib/cni/bridge]=containernetworking-plugins
    [/usr/lib/cni/host-local]=containernetworking-plugins
    [/usr/lib/cni/loopback]=containernetworking-plugins
    [/bin/busybox]=busybox-static
)
want_packages=()
for path in "${!packages[@]}"; do
    [[ -x "$path" ]] || want_packages+=("${packages[$path]}")
done
if ((${#want_packages[@]})); then
    mapfile -t want_packages < <(printf '%s\n' "${want_packages[@]}" | sort -u)
    if [[ -n "${NODE_NO_APT:-}" || $(id -u) != 0 ]]; then
        log "missing packages: ${want_packages[*]} (install them as root: apt-get install ${want_packages[*]})"
        exit 1
    fi
    log "apt-get install ${want_packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${want_packages[@]}" >&2; then
        apt-get update -q >&2
        apt-get install -y -q --no-install-recommends "${want_packages[@]}" >&2
    fi
fi
runc_path="$(command -v runc)"

k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
containerd_version="$(cd runtime && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
go_version="$(go env GOVERSION)"
src_hash="$(cat go.mod go.sum build.sh ../k8s/version-stamp.sh runtime/go.mod runtime/go.sum runtime/tools.go \
    | sha256sum | cut -c1-16)"
key="node-${k8s_version}_containerd-${containerd_version}_${go_version}_${src_hash}"
cache_root="${NODE_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/intel-device-plugins/node-bin}"
out="${cache_root}/${key}"

link_bin() { [[ -n "${NODE_BUILD_NO_LINK:-}" ]] || ln -sfn "$out" "$here/bin"; }

complete=1
for b in kubelet containerd containerd-shim-runc-v2 ctr runc busybox cni/bridge; do [[ -x "$out/$b" ]] || complete=0; done
if [[ $complete == 1 ]]; then
    log "cache hit: $out"
    link_bin
    echo "$out"
    exit 0
fi

log "building into $out (kubelet ${k8s_version}, containerd ${containerd_version}, ${go_version})"
mkdir -p "$cache_root"
tmp="$(mktemp -d "$out.tmp.XXXXXX")"; chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

# The same stamp and flags as test/k8s/build.sh: identical compile flags are what lets the two
# modules share compiled packages; only the link step differs.
# shellcheck source=../k8s/version-stamp.sh
source "$here/../k8s/version-stamp.sh"
ldflags="$(k8s_version_ldflags "$k8s_version")"

log "go mod download"
go mod download
(cd runtime && go mod download)

gobuild() { nice -n "${K8S_BUILD_NICE:-10}" go build -p "${BUILD_JOBS:-2}" -trimpath "$@"; }
t0=$SECONDS
log "kubelet"
gobuild -ldflags "$ldflags" -o "$tmp/kubelet" k8s.io/kubernetes/cmd/kubelet
log "containerd ${containerd_version}, containerd-shim-runc-v2, ctr"
containerd_pkg=github.com/containerd/containerd/v2
containerd_ldflags="-s -w -X ${containerd_pkg}/version.Version=${containerd_version}"
containerd_ldflags+=" -X ${containerd_pkg}/version.Package=${containerd_pkg}"
(cd runtime && gobuild -ldflags "$containerd_ldflags" -o "$tmp/" \
    "${containerd_pkg}/cmd/containerd" "${containerd_pkg}/cmd/containerd-shim-runc-v2" "${containerd_pkg}/cmd/ctr")
log "build took $((SECONDS - t0)) s"

# One directory with everything the node runs, so the test code looks in one place.
for exe in "$runc_path" /bin/busybox; do
    ln -s "$exe" "$tmp/$(basename "$exe")"
done
ln -s /usr/lib/cni "$tmp/cni"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
link_bin
old_builds="$(ls -1dt "$cache_root"/node-* 2>/dev/null | grep -v '\.tmp\.' | tail -n +4 || true)"
for old in $old_builds; do
    [[ "$old" == "$out" ]] || rm -rf "$old"
done
echo "$out"
