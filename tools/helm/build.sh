#!/usr/bin/env bash
# Build (or reuse) the helm command line from Go modules, pinned by this directory's go.mod/go.sum.
#
# Prints the path of the helm binary on the last line of stdout; progress goes to stderr. The cache lives
# outside the clone (HELM_BIN_CACHE, default ~/.cache/intel-device-plugins/helm-bin) and is keyed by the
# module files and the Go version, so a warm run only hashes two files. Its own module and cache: building
# helm never touches test/k8s.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0

helm_version="$(sed -n 's#^\(require \)\{0,1\}[[:space:]]*helm.sh/helm/v3 \(v[^ ]*\).*$#\2#p' go.mod)"
key="helm-${helm_version}_$(go env GOVERSION)_$(cat go.mod go.sum build.sh tools.go | sha256sum | cut -c1-16)"
cache_root="${HELM_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/intel-device-plugins/helm-bin}"
out="${cache_root}/${key}"

if [[ -x "$out/helm" ]]; then
    echo "[helm-build] cache hit: $out" >&2
    ln -sfn "$out" "$here/bin"
    echo "$out/helm"
    exit 0
fi
echo "[helm-build] building helm ${helm_version} into $out (a few minutes cold)" >&2
mkdir -p "$cache_root"
tmp="$(mktemp -d "$out.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
short="${helm_version#v}"
nice -n "${HELM_BUILD_NICE:-10}" go build -p "${BUILD_JOBS:-2}" -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${helm_version}" \
    -o "$tmp/helm" helm.sh/helm/v3/cmd/helm
"$tmp/helm" version --short >&2
mv "$tmp" "$out"
trap - EXIT
ln -sfn "$out" "$here/bin"
echo "$out/helm"
