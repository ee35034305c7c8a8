"""The RMD operator: cache and memory-bandwidth allocation for pods through the Resource Management Daemon.

``model`` is the typed ``intel.com/v1alpha1`` API, ``crds`` generates the CRDs from it, ``payload`` turns
workloads into RMD's REST JSON and back, ``client`` speaks to RMD over mutual TLS, ``reconcile`` holds the
controllers' pure decisions and ``operator``/``agent`` are their Kubernetes shells.
"""
