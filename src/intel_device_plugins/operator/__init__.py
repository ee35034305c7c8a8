"""Operator for Intel device plugins: CR model, CRDs, DaemonSets and the shell.

The pure core (model, validation, images, daemonset, reconcile, certs) never touches the network, so all of it
is unit-tested without a cluster; the shell modules wire it to the API server.
"""
