// Package iptables stands in for sigs.k8s.io/iptables-wrappers/pkg/iptables when building the kubelet of
// Kubernetes v1.38 for dra-bridge's real backend: the module proxy these machines use does not serve that module
// (403 for every version), and the kubelet imports it (pkg/kubelet/kubelet_network_linux.go) to create the
// KUBE-IPTABLES-HINT and KUBE-FIREWALL chains at start-up.
//
// It is written from that one caller's use, not from the upstream module, and it supports exactly one kind of host:
// one with no iptables at all, which is what these machines are. There the upstream NewBestEffort finds no working
// iptables binary and returns no client, and the kubelet logs "No iptables support on this system" and goes on;
// this package returns no client too. On a host that has an iptables binary it refuses to guess and panics with
// what it is, so a kubelet built with it never silently behaves unlike the real one.
package iptables

import (
	"context"
	"fmt"
	"os/exec"
	"time"
)

// Table is an iptables table name (filter, nat, mangle).
type Table string

// Chain is an iptables chain name.
type Chain string

// RulePosition says where EnsureRule puts a rule that is missing.
type RulePosition string

// Protocol is the IP family a client programs.
type Protocol string

// Mode says which iptables flavour to use.
type Mode string

const (
	TableFilter Table = "filter"
	TableNAT    Table = "nat"
	TableMangle Table = "mangle"

	ChainInput  Chain = "INPUT"
	ChainOutput Chain = "OUTPUT"

	Prepend RulePosition = "-I"
	Append  RulePosition = "-A"

	ProtocolIPv4 Protocol = "IPv4"
	ProtocolIPv6 Protocol = "IPv6"

	// UseInstalledMode: whichever flavour the host has installed.
	UseInstalledMode Mode = "installed"
)

// Interface is the part of an iptables client the kubelet calls.
type Interface interface {
	EnsureChain(ctx context.Context, table Table, chain Chain) (bool, error)
	EnsureRule(ctx context.Context, position RulePosition, table Table, chain Chain, args ...string) (bool, error)
	IsIPv6() bool
	Protocol() Protocol
	Monitor(ctx context.Context, canary Chain, tables []Table, reloadFunc func(), interval time.Duration)
}

// binaries are the programs whose presence means the host has iptables.
var binaries = []string{"iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy",
	"ip6tables-nft"}

// NewBestEffort returns a client per IP family whose iptables works: none on a host without iptables. It panics on
// a host with iptables, which this stand-in does not drive.
func NewBestEffort(ctx context.Context, mode Mode) map[Protocol]Interface {
	for _, name := range binaries {
		if path, err := exec.LookPath(name); err == nil {
			panic(fmt.Sprintf("this kubelet was built by dra-bridge's scripts/build_real.py with a stand-in for "+
				"sigs.k8s.io/iptables-wrappers that supports only hosts without iptables, and this host has %s; "+
				"build the kubelet from the upstream module instead", path))
		}
	}
	return map[Protocol]Interface{}
}
