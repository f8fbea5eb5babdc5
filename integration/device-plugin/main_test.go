package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestPreferredIsMustIncludeThenLowestNaturalIDs(t *testing.T) {
	cases := []struct {
		available, must []string
		size            int
		want            []string
	}{
		{[]string{"gpu3", "gpu1", "gpu2"}, nil, 2, []string{"gpu1", "gpu2"}},
		{[]string{"gpu10", "gpu2", "gpu9"}, nil, 2, []string{"gpu2", "gpu9"}},
		{[]string{"gpu0", "gpu1", "gpu5"}, []string{"gpu5"}, 2, []string{"gpu5", "gpu0"}},
		{[]string{"b", "a"}, nil, 5, []string{"a", "b"}},
	}
	for _, c := range cases {
		if got := preferred(c.available, c.must, c.size); !reflect.DeepEqual(got, c.want) {
			t.Errorf("preferred(%v, %v, %d) = %v, want %v", c.available, c.must, c.size, got, c.want)
		}
	}
}

// fakeKubelet is the kubelet's classic Registration service on dir/kubelet.sock.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	registered chan *pluginapi.RegisterRequest
	server     *grpc.Server
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.registered <- r
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string, registered chan *pluginapi.RegisterRequest) *fakeKubelet {
	t.Helper()
	path := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{registered: registered, server: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.server, k)
	go func() { _ = k.server.Serve(lis) }()
	return k
}

func waitRegister(t *testing.T, registered chan *pluginapi.RegisterRequest) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-registered:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
		return nil
	}
}

// Classic registration: the plugin registers, serves the API as documented, and registers
// again when a restarted kubelet removed its socket and made a new kubelet.sock.
func TestRegistersServesAndRegistersAgainAfterAKubeletRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	registered := make(chan *pluginapi.RegisterRequest, 4)
	kubelet := startKubelet(t, dir, registered)
	zero, one := int64(0), int64(1)
	config := &Config{Resource: "example.com/gpu", Devices: []DeviceConfig{{ID: "gpu1", Numa: &one}, {ID: "gpu0", Numa: &zero}, {ID: "gpu2"}}}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run(options{config: config, dpDir: dir, hostDev: "/dev/null", env: "EXAMPLE_DEVICE_IDS"}, stop)
	}()
	r := waitRegister(t, registered)
	if r.ResourceName != "example.com/gpu" || r.Endpoint != "example-com-gpu.sock" || r.Version != pluginapi.Version || !r.Options.GetPreferredAllocationAvailable {
		t.Fatalf("register request %v", r)
	}

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]string{}
	for _, d := range first.Devices {
		nodes[d.ID] = fmt.Sprint(d.Topology.GetNodes())
		if d.Health != pluginapi.Healthy {
			t.Errorf("%s is %s", d.ID, d.Health)
		}
	}
	if len(nodes) != 3 || nodes["gpu2"] != "[]" || !strings.Contains(nodes["gpu1"], "ID:1") {
		t.Fatalf("devices %v", nodes)
	}
	pref, err := client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"gpu2", "gpu1", "gpu0"}, AllocationSize: 2}}})
	if err != nil || !reflect.DeepEqual(pref.ContainerResponses[0].DeviceIDs, []string{"gpu0", "gpu1"}) {
		t.Fatalf("preferred %v %v", pref, err)
	}
	alloc, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"gpu0", "gpu1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := alloc.ContainerResponses[0]
	if c.Envs["EXAMPLE_DEVICE_IDS"] != "gpu0,gpu1" || len(c.Devices) != 2 || c.Devices[1].ContainerPath != "/dev/example-gpu1" || c.Devices[1].HostPath != "/dev/null" {
		t.Fatalf("allocate %v", c)
	}
	if _, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"gpu9"}}}}); err == nil {
		t.Fatal("an unknown device was allocated")
	}

	// The kubelet restarts: it removes the sockets in the directory and binds a new kubelet.sock.
	kubelet.server.Stop()
	_ = os.Remove(filepath.Join(dir, r.Endpoint))
	startKubelet(t, dir, registered)
	if again := waitRegister(t, registered); again.ResourceName != "example.com/gpu" {
		t.Fatalf("registered again with %v", again)
	}
	if _, err := os.Stat(filepath.Join(dir, r.Endpoint)); err != nil {
		t.Fatalf("the plugin serves again: %v", err)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
