// dra-driver: numa-shim's sample DRA driver for the suite, on the published
// k8s.io/dynamic-resource-allocation kubeletplugin library. It publishes one ResourceSlice pool
// (named after the node) with the devices of its config, each carrying the standard attribute
// `resource.kubernetes.io/numaNode` (int) and the attributes `numaNode` (int) and `pcieRoot`
// (string) in the driver's domain — what a NUMA-aware consumer such as numa-shim reads (pod →
// claim status → allocated device → ResourceSlice attribute) — and prepares claims by returning
// CDI device ids `<driver>/gpu=<device>`. A device whose config has no "numa" gets no NUMA
// attribute at all (a device without topology).
//
// Usage: dra-driver -kubeconfig FILE -node NAME -config FILE -registrar-dir DIR -plugin-dir DIR
//
// The two directories are the kubelet's `<root-dir>/plugins_registry` and
// `<root-dir>/plugins/<driver>`; without a kubelet the driver still publishes its slices.
// Config: {"driver": "gpu.example.com", "devices": [{"name": "gpu0", "numa": 0, "pcieRoot": "pci0000:00"}]}
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// standardNUMANode is the standard NUMA node attribute of DRA devices (KEP-6072).
const standardNUMANode resourceapi.QualifiedName = "resource.kubernetes.io/numaNode"

// Config is the driver's config file.
type Config struct {
	Driver  string         `json:"driver"`
	Devices []DeviceConfig `json:"devices"`
}

// DeviceConfig is one device and where it hangs off.
type DeviceConfig struct {
	Name     string `json:"name"`
	Numa     *int64 `json:"numa"`
	PCIeRoot string `json:"pcieRoot"`
}

// devices are the ResourceSlice devices of the config.
func devices(c *Config) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(c.Devices))
	for _, d := range c.Devices {
		attributes := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"pcieRoot": {StringValue: ptr.To(d.PCIeRoot)},
		}
		if d.Numa != nil {
			attributes["numaNode"] = resourceapi.DeviceAttribute{IntValue: ptr.To(*d.Numa)}
			attributes[standardNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(*d.Numa)}
		}
		out = append(out, resourceapi.Device{Name: d.Name, Attributes: attributes})
	}
	return out
}

type driver struct {
	config *Config
}

// PrepareResourceClaims returns the CDI id of every device allocated to each claim by this driver.
func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var result kubeletplugin.PrepareResult
		if claim.Status.Allocation == nil {
			result.Err = fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
			out[claim.UID] = result
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != d.config.Driver {
				continue
			}
			result.Devices = append(result.Devices, kubeletplugin.Device{
				Requests:     []string{r.Request},
				PoolName:     r.Pool,
				DeviceName:   r.Device,
				CDIDeviceIDs: []string{d.config.Driver + "/gpu=" + r.Device},
			})
		}
		names := make([]string, 0, len(result.Devices))
		for _, d := range result.Devices {
			names = append(names, d.DeviceName)
		}
		log.Printf("prepared claim %s/%s: %d devices %v", claim.Namespace, claim.Name, len(result.Devices), names)
		out[claim.UID] = result
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		log.Printf("unprepared claim %s", c.String())
		out[c.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
}

// WatchHealthStatus: the sample's devices are always healthy; it reports nothing.
func (d *driver) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (required)")
	node := flag.String("node", "", "node name the slices are for (required)")
	configPath := flag.String("config", "", "JSON config (required)")
	registrar := flag.String("registrar-dir", "", "the kubelet's plugins_registry (required)")
	pluginDir := flag.String("plugin-dir", "", "directory of the driver's own socket (required)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if *kubeconfig == "" || *node == "" || *configPath == "" || *registrar == "" || *pluginDir == "" {
		log.Fatal("-kubeconfig, -node, -config, -registrar-dir and -plugin-dir are required")
	}
	data, err := os.ReadFile(*configPath)
	if err != nil {
		log.Fatal(err)
	}
	var config Config
	if err := json.Unmarshal(data, &config); err != nil || config.Driver == "" {
		log.Fatalf("%s: not a driver config (%v)", *configPath, err)
	}
	rest, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	for _, dir := range []string{*registrar, *pluginDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			log.Fatal(err)
		}
	}
	var nodeUID types.UID
	if n, err := client.CoreV1().Nodes().Get(ctx, *node, metav1.GetOptions{}); err == nil {
		nodeUID = n.UID
	}
	helper, err := kubeletplugin.Start(ctx, &driver{config: &config},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node),
		kubeletplugin.NodeUID(nodeUID),
		kubeletplugin.DriverName(config.Driver),
		kubeletplugin.RegistrarDirectoryPath(*registrar),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
	)
	if err != nil {
		log.Fatalf("start: %v", err)
	}
	defer helper.Stop()
	resources := resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			*node: {Slices: []resourceslice.Slice{{Devices: devices(&config)}}},
		},
	}
	if err := helper.PublishResources(ctx, resources); err != nil {
		log.Fatalf("publish: %v", err)
	}
	log.Printf("publishing %d devices of %s for node %s", len(config.Devices), config.Driver, *node)
	<-ctx.Done()
	log.Printf("stopping")
}
