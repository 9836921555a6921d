"""Stand-ins for the parts of a cluster that cannot be installed on a developer machine or in CI.

`bridge.sandbox.apiserver` is a Kubernetes API emulator (real HTTP, real REST semantics) that the official
`kubernetes` client talks to unmodified. Other stand-ins (the kubelet simulator, the demo) live beside it. Nothing in
this package imports the `kubernetes` client: the emulator speaks the wire protocol, not the client's models.
"""
