"""The kubelet's gRPC APIs: the protos beside this file, their codecs and one gRPC stack for all.

``deviceplugin_v1beta1`` (device plugins and their registration), ``pluginregistration_v1`` (the
plugin watcher's registration of DRA drivers), ``dra_v1`` (claim preparation), ``dra_health_v1`` and
``dra_health_v1alpha1`` (the two versions of the health stream a 1.37 kubelet accepts; 1.36 kubelets
know only v1alpha1) and ``podresources_v1`` (the RMD node agent's question about CPUs). The protos are
the kubelet's own with only ``go_package`` changed, so the wire names match. The ``*_v*.py`` modules
are generated from them by ``tools/genproto.py`` (``make protos``); ``wire.py`` is what they share and
``rpc.py`` serves and calls them over grpclib.
"""
