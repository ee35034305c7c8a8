"""The Kubernetes machinery the control-plane components share.

Leader election, the work queue and its worker loop, API errors, metrics, the hardened HTTPS server,
certificates, following the API, and the serving lifecycle. The device-plugin operator, RMD and the pod
webhooks are built on top of this package; it imports none of them.
"""
