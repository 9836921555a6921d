"""The real backend of the sandbox: Kubernetes components built from their published Go modules
(`scripts/build_real.py`) and run on loopback, each in its own process with real TLS, authentication and
authorization. `plane.ControlPlane` is the control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler); `SandboxCluster(ClusterSpec(backend="real"))` puts the bridge's nodes and components on it."""
