"""Pod admission webhooks: FPGA accelerator-function mapping and SGX enclave wiring.

The mutations are pure functions from a pod (and, for FPGA, the namespace's mappings) to JSON patch
operations; ``review`` turns AdmissionReviews into answers; the servers live in the operator's
``webhook_server`` module and in ``cli`` for the standalone processes.
"""
