// device-plugin: numa-shim's sample device plugin for the real-kubelet tests. It advertises the
// devices of one extended resource (e.g. example.com/gpu) from a JSON config, each with the NUMA
// node of its TopologyInfo, on the kubelet's device plugin API v1beta1
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), and answers:
//
//   - ListAndWatch: every configured device, Healthy, with its NUMA node (none when the config
//     gives none);
//   - GetPreferredAllocation: deterministic (see preferred): the must-include ids, then the other
//     available ids in ascending natural order ("gpu2" < "gpu10"). The kubelet only offers the
//     devices on the NUMA nodes of the container's topology hint when they suffice, so this is
//     "the lowest ids on the requested nodes";
//   - Allocate: per device a device node (HostPath, /dev/null by default, created in the
//     container as /dev/example-<id>) and the env var (-env, default EXAMPLE_DEVICE_IDS) naming
//     the allocated ids, comma-separated, in request order.
//
// Registration, either way the kubelet v1.37 accepts:
//
//   - -device-plugin-dir DIR (default /var/lib/kubelet/device-plugins, the directory the kubelet
//     hard-codes, whatever its --root-dir): serves DIR/<socket> and calls Register on
//     DIR/kubelet.sock. A restarted kubelet removes every socket in DIR and makes a new
//     kubelet.sock: the plugin sees either and serves and registers again;
//   - -plugins-registry DIR (the kubelet's <root-dir>/plugins_registry): serves the plugin
//     watcher's Registration service (type DevicePlugin) and the device plugin on DIR/<socket>;
//     the kubelet finds it there, also after a restart. This keeps a test kubelet private: its
//     root dir is its own, the hard-coded directory is not.
//
// Config: {"resource": "example.com/gpu", "devices": [{"id": "gpu0", "numa": 0}, {"id": "gpu1"}]}
// ("numa" absent: no topology).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Config is the plugin's config file.
type Config struct {
	Resource string         `json:"resource"`
	Devices  []DeviceConfig `json:"devices"`
}

// DeviceConfig is one device; Numa nil: the device has no topology.
type DeviceConfig struct {
	ID   string `json:"id"`
	Numa *int64 `json:"numa,omitempty"`
}

func loadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Resource == "" || !strings.Contains(c.Resource, "/") {
		return nil, fmt.Errorf("%s: resource %q is not an extended resource name (domain/name)", path, c.Resource)
	}
	seen := map[string]bool{}
	for _, d := range c.Devices {
		if d.ID == "" || seen[d.ID] {
			return nil, fmt.Errorf("%s: device id %q is empty or repeated", path, d.ID)
		}
		seen[d.ID] = true
	}
	return &c, nil
}

// plugin serves the device plugin API (and, in plugin-watcher mode, the Registration service).
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	registerapi.UnimplementedRegistrationServer
	config  *Config
	hostDev string
	env     string
	socket  string
	watcher bool
	stop    chan struct{}
}

func (p *plugin) devices() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(p.config.Devices))
	for _, d := range p.config.Devices {
		dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
		if d.Numa != nil {
			dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: *d.Numa}}}
		}
		out = append(out, dev)
	}
	return out
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	log.Printf("ListAndWatch: advertising %d devices of %s", len(p.config.Devices), p.config.Resource)
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

// natural orders ids with their digit runs compared as numbers ("gpu2" < "gpu10").
func natural(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// preferred is the deterministic preference: the must-include ids (in their order), then the
// other available ids in natural order, up to size.
func preferred(available, mustInclude []string, size int) []string {
	out := make([]string, 0, size)
	taken := map[string]bool{}
	for _, id := range mustInclude {
		if len(out) < size && !taken[id] {
			out = append(out, id)
			taken[id] = true
		}
	}
	rest := append([]string(nil), available...)
	sort.SliceStable(rest, func(i, j int) bool { return natural(rest[i], rest[j]) })
	for _, id := range rest {
		if len(out) >= size {
			break
		}
		if !taken[id] {
			out = append(out, id)
			taken[id] = true
		}
	}
	return out
}

func (p *plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := preferred(c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		log.Printf("GetPreferredAllocation: available %v must-include %v size %d -> %v",
			c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, c.AllocationSize, ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, d := range p.config.Devices {
		known[d.ID] = true
	}
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		car := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{p.env: strings.Join(c.DevicesIds, ",")}}
		for _, id := range c.DevicesIds {
			if !known[id] {
				return nil, fmt.Errorf("allocate: unknown device %q of %s", id, p.config.Resource)
			}
			car.Devices = append(car.Devices, &pluginapi.DeviceSpec{
				ContainerPath: "/dev/example-" + id,
				HostPath:      p.hostDev,
				Permissions:   "rw",
			})
		}
		log.Printf("Allocate: %v", c.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// GetInfo and NotifyRegistrationStatus: the kubelet's plugin watcher (plugin-watcher mode).
func (p *plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              p.config.Resource,
		Endpoint:          p.socket,
		SupportedVersions: []string{pluginapi.Version},
	}, nil
}

func (p *plugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("registered with the kubelet (plugin watcher)")
	} else {
		log.Printf("the kubelet refused the registration: %s", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// serve listens on p.socket (a stale file there is replaced) and serves until the server stops.
func (p *plugin) serve() (*grpc.Server, error) {
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, err
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	if p.watcher {
		registerapi.RegisterRegistrationServer(s, p)
	}
	go func() {
		if err := s.Serve(lis); err != nil {
			log.Printf("serve %s: %v", p.socket, err)
		}
	}()
	return s, nil
}

// register calls the kubelet's Register on kubeletSock (classic mode).
func (p *plugin) register(kubeletSock string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.config.Resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	return err
}

// identity is what tells a new file at path from the old one (device and inode).
func identity(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return uint64(st.Dev)<<32 ^ st.Ino, true
}

// options are the command line's settings.
type options struct {
	config     *Config
	dpDir      string
	registry   string
	socketName string
	hostDev    string
	env        string
}

func main() {
	configPath := flag.String("config", "", "JSON config: resource and devices (required)")
	var o options
	flag.StringVar(&o.dpDir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin directory (classic registration on DIR/kubelet.sock)")
	flag.StringVar(&o.registry, "plugins-registry", "", "register through the kubelet's plugin watcher in this directory (<root-dir>/plugins_registry) instead")
	flag.StringVar(&o.socketName, "socket", "", "socket file name [<resource with / and . as ->.sock]")
	flag.StringVar(&o.hostDev, "host-dev", "/dev/null", "host device node each allocated device is created from")
	flag.StringVar(&o.env, "env", "EXAMPLE_DEVICE_IDS", "env var naming the allocated device ids")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if *configPath == "" {
		log.Fatal("-config is required")
	}
	config, err := loadConfig(*configPath)
	if err != nil {
		log.Fatal(err)
	}
	o.config = config
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan struct{})
	go func() {
		sig := <-signals
		log.Printf("%v: stopping", sig)
		close(stop)
	}()
	if err := run(o, stop); err != nil {
		log.Fatal(err)
	}
}

// run serves and registers the plugin until stop is closed; it serves and registers again when
// its socket goes or (classic registration) the kubelet's socket is replaced.
func run(o options, stop <-chan struct{}) error {
	name := o.socketName
	if name == "" {
		name = strings.NewReplacer("/", "-", ".", "-").Replace(o.config.Resource) + ".sock"
	}
	dir := o.dpDir
	if o.registry != "" {
		dir = o.registry
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	p := &plugin{
		config:  o.config,
		hostDev: o.hostDev,
		env:     o.env,
		socket:  filepath.Join(dir, name),
		watcher: o.registry != "",
		stop:    make(chan struct{}),
	}
	var mu sync.Mutex
	var server *grpc.Server
	start := func() error {
		mu.Lock()
		defer mu.Unlock()
		if server != nil {
			server.Stop()
		}
		var err error
		server, err = p.serve()
		if err != nil {
			return fmt.Errorf("serve %s: %w", p.socket, err)
		}
		log.Printf("serving %s (%d devices) on %s", o.config.Resource, len(o.config.Devices), p.socket)
		return nil
	}
	if err := start(); err != nil {
		return err
	}
	kubeletSock := filepath.Join(o.dpDir, "kubelet.sock")
	var kubeletID uint64
	registered := false
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		if _, ok := identity(p.socket); !ok {
			// A restarted kubelet (classic) or someone else removed our socket: serve again.
			log.Printf("socket %s is gone: serving again", p.socket)
			if err := start(); err != nil {
				return err
			}
			registered = false
		}
		if !p.watcher {
			id, ok := identity(kubeletSock)
			if ok && (!registered || id != kubeletID) {
				if err := p.register(kubeletSock); err != nil {
					log.Printf("register on %s: %v (retrying)", kubeletSock, err)
				} else {
					log.Printf("registered %s on %s", o.config.Resource, kubeletSock)
					registered, kubeletID = true, id
				}
			}
		}
		select {
		case <-stop:
			close(p.stop)
			mu.Lock()
			server.Stop()
			mu.Unlock()
			_ = os.Remove(p.socket)
			return nil
		case <-ticker.C:
		}
	}
}
