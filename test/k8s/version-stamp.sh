# Sourced by test/k8s/build.sh and test/node/build.sh: the linker flags that stamp a Kubernetes
# binary with its release, as upstream's hack/lib/version.sh does.
#
# Why: without the stamp `--version` says v0.0.0-master, and tools that pick flags by version
# (kwokctl, kubectl's skew checks) misbehave. Why one file: the control plane and the kubelet are
# compiled with identical flags so that Go's build cache compiles each package they share once;
# buildDate only affects the link step, so compiled packages stay cached.

# k8s_version_ldflags <version, e.g. v1.36.3>: prints the -ldflags value.
k8s_version_ldflags() {
    local version="$1" minor build_date flags pkg
    minor="${version#v1.}"; minor="${minor%%.*}"
    build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    flags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
        flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${build_date}"
    done
    echo "$flags"
}
