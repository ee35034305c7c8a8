"""Entry points that put several packages together into one program.

The operator binary serves the FPGA and SGX pod webhooks beside its own, and the CRD generator writes the
files of both; ``operator/`` and ``webhooks/`` stay independent of each other and meet only here.
"""
