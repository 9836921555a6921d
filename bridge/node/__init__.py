"""The node daemon (`bridge node`): one process per GPU node serving the kubelet through the device-plugin API
(and, later, the DRA kubelet-plugin API) from one inventory. `daemon.py` is the composition root."""
