//go:build tools

// Package tools pins the container runtime of the test tier's real node: containerd 2 with its runc
// shim and ctr, built from Go modules by ../build.sh.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
