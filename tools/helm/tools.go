//go:build tools

// Package tools pins the helm command line, built from Go modules by build.sh.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
