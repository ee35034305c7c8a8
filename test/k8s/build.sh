#!/usr/bin/env bash
# Build (or reuse) the genuine Kubernetes binaries the integration tier runs against.
#
# Prints the directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok (+ its stage files) and devicemanager-harness on the last line of stdout; all
# progress goes to stderr. A warm run only hashes a few files.
#
# Why a cache outside the work tree by default: CI runs in a fresh clone on the same machine, so
# a cache inside the clone would be thrown away each time; ~/.cache survives next to Go's own
# build cache. Override with K8S_BIN_CACHE=<dir>.
#
# Environment: K8S_BIN_CACHE (cache root), BUILD_JOBS (go build -p, default 2),
# K8S_BUILD_NICE (nice level, default 10), K8S_BUILD_ONLY (space-separated subset, for benchmarks),
# K8S_BUILD_NO_LINK=1 (leave the test/k8s/bin symlink alone, for builds into a throw-away cache).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

KWOK_VERSION="v0.8.0"
# -mod=readonly: the committed go.mod/go.sum are the whole truth; drift fails instead of being fixed up.
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

log() { echo "[k8s-build] $*" >&2; }

k8s_version="$(sed -n 's#^require k8s.io/kubernetes \(v[^ ]*\).*$#\1#p' go.mod)"
[[ -n "$k8s_version" ]] || k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
go_version="$(go env GOVERSION)"
src_hash="$( (cat go.mod go.sum build.sh version-stamp.sh; find harness -type f -name '*.go' | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)"
key="k8s-${k8s_version}_kwok-${KWOK_VERSION}_${go_version}_${src_hash}"
cache_root="${K8S_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/intel-device-plugins/k8s-bin}"
out="${cache_root}/${key}"

link_bin() { [[ -n "${K8S_BUILD_NO_LINK:-}" ]] || ln -sfn "$out" "$here/bin"; }

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok devicemanager-harness)
complete=1
for b in "${binaries[@]}"; do [[ -x "$out/$b" ]] || complete=0; done
[[ -d "$out/kwok-stages" ]] || complete=0

if [[ $complete == 1 && -z "${K8S_BUILD_ONLY:-}" ]]; then
    log "cache hit: $out"
    link_bin
    echo "$out"
    exit 0
fi

log "building into $out (k8s ${k8s_version}, kwok ${KWOK_VERSION}, ${go_version})"
mkdir -p "$cache_root"
# A private staging directory: two concurrent builds of the same key must not mix files.
tmp="$(mktemp -d "$out.tmp.XXXXXX")"; chmod 755 "$tmp"
if [[ -z "${K8S_BUILD_ONLY:-}" ]]; then trap 'rm -rf "$tmp"' EXIT; fi
nice_cmd=(nice -n "${K8S_BUILD_NICE:-10}")
jobs="${BUILD_JOBS:-2}"
want() { [[ -z "${K8S_BUILD_ONLY:-}" || " ${K8S_BUILD_ONLY} " == *" $1 "* ]]; }

# shellcheck source=version-stamp.sh
source "$here/version-stamp.sh"
ldflags="$(k8s_version_ldflags "$k8s_version")"

log "go mod download"
go mod download

gobuild() { "${nice_cmd[@]}" go build -p "$jobs" -trimpath -ldflags "$ldflags" "$@"; }

t0=$SECONDS
if want etcd; then
    log "etcd"; gobuild -o "$tmp/etcd" go.etcd.io/etcd/server/v3
fi
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    if want "$cmd"; then
        log "$cmd"; gobuild -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    fi
done
if want devicemanager-harness; then
    log "devicemanager-harness"; gobuild -o "$tmp/devicemanager-harness" ./harness
fi
if want kwok; then
    # kwok comes from its own module (no replace directives, so `go install` works) to keep its
    # newer grpc/otel pins out of the Kubernetes build graph.
    log "kwok ${KWOK_VERSION}"
    GOBIN="$tmp" GOFLAGS= "${nice_cmd[@]}" go install -p "$jobs" -trimpath -ldflags "-s -w" \
        "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
    # kwok >= 0.8 refuses to start without stages; they ship in its module zip.
    kwok_dir="$(GOFLAGS= go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
    rm -rf "$tmp/kwok-stages"; mkdir -p "$tmp/kwok-stages"
    cp -r "$kwok_dir/kustomize/stage/." "$tmp/kwok-stages/"
    chmod -R u+w "$tmp/kwok-stages"
fi
log "build took $((SECONDS - t0)) s"

if [[ -n "${K8S_BUILD_ONLY:-}" ]]; then
    echo "$tmp"   # partial build: left in place for the caller
    exit 0
fi
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
link_bin
# Keep the three most recent builds (other work trees may use other keys); each is ~500 MB.
old_builds="$(ls -1dt "$cache_root"/k8s-* 2>/dev/null | grep -v '\.tmp\.' | tail -n +4 || true)"
for old in $old_builds; do
    [[ "$old" == "$out" ]] || rm -rf "$old"
done
echo "$out"
