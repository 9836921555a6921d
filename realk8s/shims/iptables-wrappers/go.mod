// Written for dra-bridge's real backend (scripts/build_real.py); not the upstream module. See pkg/iptables/shim.go.
module sigs.k8s.io/iptables-wrappers

go 1.24
