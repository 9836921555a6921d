"""The legacy half of the node daemon: a kubelet device plugin (API v1beta1) for `nvidia.com/gpu`.

Pure parts (`preferred`, `allocate`) compute answers from values; `state` holds the live device table; the gRPC
servicer, registration client and lifecycle (`servicer`, `registration`, `plugin`) only do I/O around them.
"""
