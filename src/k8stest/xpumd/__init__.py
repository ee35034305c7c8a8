"""protobuf's classes of xpumd's device-info API (tools/genproto.py): the tests' reference and server."""
