"""The kubelet's DRA gRPC APIs, compiled from the protos beside this file (``tools/genproto.py``).

``dra_v1`` is the claim preparation service; ``dra_health_v1`` and ``dra_health_v1alpha1`` are the
two versions of the health stream a 1.37 kubelet accepts (it prefers v1; 1.36 kubelets know only
v1alpha1). The protos are the kubelet's own with only ``go_package`` changed, so the wire names match.
"""
