// godra: the floor for issue 25 item 3b, a DRA kubelet plugin in Go on the upstream helper
// (k8s.io/dynamic-resource-allocation/kubeletplugin, the one NVIDIA's and the example driver use).
//
// The helper does what every driver on it does per NodePrepareResources: it GETs each claim from the API server
// and checks its UID and allocation, then calls PrepareResourceClaims. This driver then answers at once with the
// claim's devices of its own driver: no checkpoint, no CDI spec, no ownership checks. So the kubelet's
// dra_operations_duration_seconds for its claims is what the kubelet, the API server and the helper cost on this
// machine, with no driver work at all: a Python driver cannot be faster than it there.
//
// It publishes one ResourceSlice for its node with --devices devices (dev-0 ...) and serves the kubelet at its
// default paths (/var/lib/kubelet/plugins_registry, /var/lib/kubelet/plugins/<driver>). bench/real_pod_start_bench.py
// runs it inside the real node's mount namespace with the node's own credentials.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

type driver struct{ name string }

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var res kubeletplugin.PrepareResult
		if c.Status.Allocation == nil {
			res.Err = fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
		} else {
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Driver == d.name {
					res.Devices = append(res.Devices, kubeletplugin.Device{
						Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
				}
			}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "godra: %s: %v\n", msg, err)
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	name := flag.String("driver", "floor.bench.dra-bridge.io", "DRA driver name")
	node := flag.String("node-name", "", "this node's name")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig with the node's credentials")
	devices := flag.Int("devices", 4, "devices published in the node's slice")
	publish := flag.Bool("publish", true, "publish the node's ResourceSlice (false: another driver process owns it)")
	pluginDir := flag.String("plugin-dir", "", "where the DRA socket goes (default: the kubelet's plugins dir/<driver>)")
	registrarDir := flag.String("registrar-dir", "", "where the registration socket goes (default: the kubelet's)")
	flag.Parse()
	if *node == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "godra: --node-name and --kubeconfig are required")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	failIf(err, "")
	// No client-side rate limit: client-go's default (5 requests a second, bursts of 10) would make calls back to back
	// wait for it, which is not what the floor measures.
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	failIf(err, "")
	if *pluginDir == "" {
		*pluginDir = filepath.Join(kubeletplugin.KubeletPluginsDir, *name)
	}
	// The helper listens in the plugin's data directory but does not make it (a DaemonSet's hostPath usually does).
	failIf(os.MkdirAll(*pluginDir, 0o750), "")
	opts := []kubeletplugin.Option{kubeletplugin.KubeClient(client), kubeletplugin.NodeName(*node),
		kubeletplugin.DriverName(*name), kubeletplugin.HealthService(false),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir)}
	if *registrarDir != "" {
		failIf(os.MkdirAll(*registrarDir, 0o750), "")
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(*registrarDir))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, &driver{name: *name}, opts...)
	failIf(err, "start: ")
	what := "(no slice)"
	if *publish {
		devs := make([]resourceapi.Device, *devices)
		for i := range devs {
			devs[i] = resourceapi.Device{Name: fmt.Sprintf("dev-%d", i)}
		}
		failIf(helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
			*node: {Slices: []resourceslice.Slice{{Devices: devs}}}}}), "publish: ")
		what = fmt.Sprintf("(%d devices published)", *devices)
	}
	fmt.Println("godra: serving", *name, "on", *node, what)
	<-ctx.Done()
	helper.Stop()
}

// failIf ends the process with status 1 when err is set, the message prefixed with `what`.
func failIf(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "godra: %s%v\n", what, err)
		os.Exit(1)
	}
}
