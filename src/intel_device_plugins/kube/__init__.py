"""The Kubernetes machinery the control-plane components share.

Leader election, the work queue and its worker loop, API errors, metrics, the hardened HTTPS server and
its serving lifecycle, certificates (one issuer), following the API (list, watch, relist), the CRD
document shape, and the names of this project's images; and for node agents that must stay small
(the DRA drivers), a REST client of its own and quantities (``rest``, ``quantity``). The device-plugin
operator, RMD and the pod webhooks are built on top of this package; it imports none of them.
"""
