"""Test infrastructure on genuine Kubernetes code.

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (built by
``test/k8s/build.sh``) on loopback, and the kubelet's own device manager inside a Go harness, so
the integration tier exercises what production clusters run. Fixtures live in
:mod:`k8stest.pytest_plugin`.
"""
