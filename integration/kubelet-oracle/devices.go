package main

// devices.go: the kubelet's device manager (pkg/kubelet/cm/devicemanager) for a case with
// devices, and the stub device plugins (the kubelet's own plugin/v1beta1 Stub) that advertise
// them over the device-plugin API on private sockets.
//
// The kubelet's NewManagerImpl listens on /var/lib/kubelet/device-plugins/kubelet.sock and
// checkpoints there; the oracle runs many cases, in parallel with other programs, so it calls
// the constructor that NewManagerImpl wraps, which takes the socket path (newManagerImpl, reached
// by go:linkname), with a socket in the case's own state directory.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
)

//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)

// CaseDevice is one device of a case: its id and the NUMA nodes of its TopologyInfo (none: the
// plugin gives no topology).
type CaseDevice struct {
	ID   string `json:"id"`
	NUMA []int  `json:"numa,omitempty"`
}

// deviceStack is a case's device manager and its plugins.
type deviceStack struct {
	manager *devicemanager.ManagerImpl
	stubs   []*plugin.Stub
}

// newDeviceManager creates the device manager as NewContainerManager does (before the CPU
// Manager; the caller adds it as the Topology Manager's first hint provider).
func newDeviceManager(logger klog.Logger, mi *cadvisorapi.MachineInfo, tm topologymanager.Manager, dir string) (*devicemanager.ManagerImpl, error) {
	return newManagerImpl(logger, filepath.Join(pluginDir(dir), "kubelet.sock"), mi.Topology, tm)
}

// pluginDir is where a case's device manager and plugins have their sockets (and the manager
// its checkpoint): under the case's state directory.
func pluginDir(stateDir string) string {
	return filepath.Join(stateDir, "device-plugins")
}

// startDevices is containerManagerImpl.Start's deviceManager.Start, then one stub plugin per
// resource registering and advertising its devices; it returns when the manager lists them all.
func startDevices(ctx context.Context, m *devicemanager.ManagerImpl, stateDir string, active *activePods, devices map[string][]CaseDevice) (*deviceStack, error) {
	logger := klog.FromContext(ctx)
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if err := m.Start(logger, devicemanager.ActivePodsFunc(active.list), sourcesReady, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("start device manager error: %w", err)
	}
	ds := &deviceStack{manager: m}
	kubeletSock := filepath.Join(pluginDir(stateDir), "kubelet.sock")
	resources := slices.Sorted(func(yield func(string) bool) {
		for r := range devices {
			if !yield(r) {
				return
			}
		}
	})
	for i, res := range resources {
		var devs []*pluginapi.Device
		for _, d := range devices[res] {
			dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
			if len(d.NUMA) > 0 {
				dev.Topology = &pluginapi.TopologyInfo{}
				for _, n := range d.NUMA {
					dev.Topology.Nodes = append(dev.Topology.Nodes, &pluginapi.NUMANode{ID: int64(n)})
				}
			}
			devs = append(devs, dev)
		}
		sock := filepath.Join(pluginDir(stateDir), fmt.Sprintf("plugin-%d.sock", i))
		stub := plugin.NewDevicePluginStub(logger, devs, sock, res, false, true)
		stub.SetGetPreferredAllocFunc(preferLowestIDs)
		stub.SetAllocFunc(allocateWithEnv)
		if err := stub.Start(ctx); err != nil {
			ds.stop(logger)
			return nil, fmt.Errorf("device plugin %s: %w", res, err)
		}
		ds.stubs = append(ds.stubs, stub)
		if err := stub.Register(ctx, kubeletSock, res, ""); err != nil {
			ds.stop(logger)
			return nil, fmt.Errorf("device plugin %s: register: %w", res, err)
		}
	}
	// Registration connects and starts ListAndWatch asynchronously: wait for every device.
	deadline := time.Now().Add(10 * time.Second)
	for {
		known := m.GetAllocatableDevices(logger)
		ready := true
		for res, devs := range devices {
			if len(known[res]) != len(devs) {
				ready = false
			}
		}
		if ready {
			return ds, nil
		}
		if time.Now().After(deadline) {
			ds.stop(logger)
			return nil, fmt.Errorf("device plugins did not advertise their devices within 10s")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (ds *deviceStack) stop(logger klog.Logger) {
	for _, s := range ds.stubs {
		_ = s.Stop(logger)
	}
	_ = ds.manager.Stop(logger)
}

// preferLowestIDs is every stub plugin's GetPreferredAllocation, the preference numa-shim
// assumes (docs/devices.md): the devices that must be included, then the lowest ids (byte order)
// of the other available ones, up to the allocation size.
func preferLowestIDs(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, req := range r.ContainerRequests {
		chosen := sets.New(req.MustIncludeDeviceIDs...)
		for _, id := range slices.Sorted(slices.Values(req.AvailableDeviceIDs)) {
			if chosen.Len() >= int(req.AllocationSize) {
				break
			}
			chosen.Insert(id)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: sets.List(chosen)})
	}
	return resp, nil
}

// allocateWithEnv is every stub plugin's Allocate: one response per container, an environment
// variable naming the devices (the kubelet refuses an empty response).
func allocateWithEnv(r *pluginapi.AllocateRequest, _ map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, req := range r.ContainerRequests {
		ids := slices.Sorted(slices.Values(req.DevicesIds))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"ORACLE_DEVICES": strings.Join(ids, ",")},
		})
	}
	return resp, nil
}

// containerDevices is GetDevices (what PodResources lists): resource → ids ascending.
func containerDevices(m *devicemanager.ManagerImpl, podUID, container string) map[string][]string {
	if m == nil {
		return nil
	}
	out := map[string][]string{}
	for res, devs := range m.GetDevices(podUID, container) {
		var ids []string
		for id := range devs {
			ids = append(ids, id)
		}
		if len(ids) > 0 {
			slices.Sort(ids)
			out[res] = ids
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// startDevicesOf is the kubelet's GetDeviceRunContainerOptions before a container is created:
// devices not allocated at admission (a pod-level pod under the pod scope) are allocated now.
func startDevicesOf(ctx context.Context, m *devicemanager.ManagerImpl, pod *v1.Pod, c *v1.Container) error {
	if m == nil {
		return nil
	}
	_, err := m.GetDeviceRunContainerOptions(ctx, pod, c)
	if err != nil {
		return fmt.Errorf("%s", strings.TrimSpace(err.Error()))
	}
	return nil
}
