package main

// managers.go: the kubelet's Topology, CPU and Memory Managers for one case, created, wired and
// started as pkg/kubelet/cm/container_manager_linux.go does (NewContainerManager, Start), and
// driven through the calls the kubelet makes: Admit (the allocation admit handler),
// PreStartContainer and PostStopContainer (internal_container_lifecycle.go).

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

// quiescedReconcilePeriod replaces cpuManagerReconcilePeriod. The CPU Manager's reconcile loop
// only pushes cpusets to the runtime and sweeps stale state (which the oracle does itself after
// every step); it is ended in its first pass (see activePods), and were it not, it would not
// come back during a case.
const quiescedReconcilePeriod = 1000 * time.Hour

// node is one kubelet's resource managers.
type node struct {
	topologyManager topologymanager.Manager
	deviceManager   *devicemanager.ManagerImpl // nil when the case has no devices
	devices         *deviceStack
	cpuManager      cpumanager.Manager
	memoryManager   memorymanager.Manager
	active          *activePods
}

// newNode creates the managers in NewContainerManager's order (the device manager first, only
// when the case has devices: without them it has no hints and allocates nothing), adds each as a
// hint provider, and starts them as containerManagerImpl.Start does. stateDir is the kubelet
// root dir where they checkpoint.
func newNode(ctx context.Context, mi *cadvisorapi.MachineInfo, nc *nodeConfig, stateDir string, devices map[string][]CaseDevice) (*node, error) {
	logger := klog.FromContext(ctx)
	kc := nc.kc
	n := &node{active: newActivePods()}
	var err error

	n.topologyManager, err = topologymanager.NewManager(logger, mi.Topology,
		kc.TopologyManagerPolicy, kc.TopologyManagerScope, nc.topologyManagerPolicyOptions)
	if err != nil {
		return nil, err
	}
	if len(devices) > 0 {
		n.deviceManager, err = newDeviceManager(logger, mi, n.topologyManager, stateDir)
		if err != nil {
			return nil, err
		}
		n.topologyManager.AddHintProvider(logger, n.deviceManager)
	}
	n.cpuManager, err = cpumanager.NewManager(logger, kc.CPUManagerPolicy, kc.CPUManagerPolicyOptions,
		quiescedReconcilePeriod, mi, nc.reservedSystemCPUs, nc.reservation, stateDir, n.topologyManager)
	if err != nil {
		return nil, err
	}
	n.topologyManager.AddHintProvider(logger, n.cpuManager)
	n.memoryManager, err = memorymanager.NewManager(logger, kc.MemoryManagerPolicy, mi, nc.reservation,
		kc.ReservedMemory, stateDir, n.topologyManager)
	if err != nil {
		return nil, err
	}
	n.topologyManager.AddHintProvider(logger, n.memoryManager)

	// containerManagerImpl.Start: the runtime has no containers yet.
	containerMap := containermap.NewContainerMap()
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	if kc.CPUManagerPolicy == string(cpumanager.PolicyStatic) {
		n.active.endReconciler()
	}
	if err := n.cpuManager.Start(ctx, cpumanager.ActivePodsFunc(n.active.list), sourcesReady, noPodStatus{}, noRuntime{}, containerMap.Clone()); err != nil {
		return nil, fmt.Errorf("start cpu manager error: %w", err)
	}
	if kc.CPUManagerPolicy == string(cpumanager.PolicyStatic) {
		if err := n.active.awaitReconcilerEnd(10 * time.Second); err != nil {
			return nil, err
		}
	}
	if err := n.memoryManager.Start(ctx, memorymanager.ActivePodsFunc(n.active.list), sourcesReady, noPodStatus{}, noRuntime{}, containerMap.Clone()); err != nil {
		return nil, fmt.Errorf("start memory manager error: %w", err)
	}
	if err := validateNodeAllocatable(cadvisor.CapacityFromMachineInfo(mi), nc.reservation); err != nil {
		return nil, err
	}
	if n.deviceManager != nil {
		n.devices, err = startDevices(ctx, n.deviceManager, stateDir, n.active, devices)
		if err != nil {
			return nil, err
		}
	}
	return n, nil
}

// stop ends the device plugins and the device manager's registration server.
func (n *node) stop(logger klog.Logger) {
	if n.devices != nil {
		n.devices.stop(logger)
	}
}

// admit is the kubelet's allocation admit handler (cm.GetAllocateResourcesPodAdmitHandler, the
// Topology Manager) for a pod being added; pod must already be in the active list, as the
// kubelet's pod manager holds it during admission.
func (n *node) admit(ctx context.Context, pod *v1.Pod) lifecycle.PodAdmitResult {
	others := []*v1.Pod{}
	for _, p := range n.active.list() {
		if p.UID != pod.UID {
			others = append(others, p)
		}
	}
	return n.topologyManager.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation})
}

// preStartContainer is internalContainerLifecycleImpl.PreStartContainer.
func (n *node) preStartContainer(logger klog.Logger, pod *v1.Pod, container *v1.Container, containerID string) {
	n.cpuManager.AddContainer(logger, pod, container, containerID)
	n.memoryManager.AddContainer(logger, pod, container, containerID)
	n.topologyManager.AddContainer(logger, pod, container, containerID)
}

// postStopContainer is internalContainerLifecycleImpl.PostStopContainer: only the Topology
// Manager forgets the container. The CPU and Memory Managers keep a container's resources while
// its pod is active (the kubelet never calls their RemoveContainer); they free them in
// removeStaleState once the pod has left the active list.
func (n *node) postStopContainer(logger klog.Logger, containerID string) {
	_ = n.topologyManager.RemoveContainer(logger, containerID)
}

// sweep runs the CPU and Memory Managers' removeStaleState, which the kubelet runs at the start
// of every hint request and allocation (and of each reconcile pass): state of containers whose
// pod is no longer active is released through the policies' RemoveContainer. It is reached
// through GetTopologyHints for a BestEffort probe pod, which no policy gives hints for.
func (n *node) sweep(logger klog.Logger) {
	if n.deviceManager != nil {
		n.deviceManager.UpdateAllocatedDevices(logger)
	}
	n.cpuManager.GetTopologyHints(logger, probePod, &probePod.Spec.Containers[0], lifecycle.AddOperation)
	n.memoryManager.GetTopologyHints(logger, probePod, &probePod.Spec.Containers[0], lifecycle.AddOperation)
}

var probePod = &v1.Pod{
	ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubelet-oracle-probe", UID: "kubelet-oracle-probe"},
	Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "probe"}}},
	Status:     v1.PodStatus{QOSClass: v1.PodQOSBestEffort},
}

// activePods is the kubelet's GetActivePods for the managers: admitted pods not yet removed.
//
// It also ends the CPU Manager's reconcile loop (static policy), whose goroutine Start launches
// with no way to stop it: its first pass starts at once and lists the active pods in
// removeStaleState, before touching anything; that call ends the goroutine (runtime.Goexit runs
// its deferred unlocks). The pass would have found no pod and no state, so nothing it would have
// done is lost; without the loop a case is deterministic, and the managers of finished cases
// can be garbage collected.
type activePods struct {
	mu        sync.Mutex
	pods      []*v1.Pod
	endNext   bool
	loopEnded chan struct{}
}

func newActivePods() *activePods { return &activePods{loopEnded: make(chan struct{})} }

func (a *activePods) list() []*v1.Pod {
	a.mu.Lock()
	if a.endNext {
		a.endNext = false
		close(a.loopEnded)
		a.mu.Unlock()
		runtime.Goexit()
	}
	pods := append([]*v1.Pod(nil), a.pods...)
	a.mu.Unlock()
	return pods
}

// endReconciler makes the next call of list, the reconcile loop's first, end its goroutine.
func (a *activePods) endReconciler() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endNext = true
}

// awaitReconcilerEnd waits for the reconcile loop's goroutine to end in list.
func (a *activePods) awaitReconcilerEnd(timeout time.Duration) error {
	select {
	case <-a.loopEnded:
		return nil
	case <-time.After(timeout):
		a.mu.Lock()
		defer a.mu.Unlock()
		a.endNext = false
		return fmt.Errorf("the cpu manager's reconcile loop did not start within %v", timeout)
	}
}

func (a *activePods) add(pod *v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods = append(a.pods, pod)
}

func (a *activePods) remove(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range a.pods {
		if p.UID == uid {
			a.pods = append(a.pods[:i], a.pods[i+1:]...)
			return
		}
	}
}

// noPodStatus is the pod status provider: the reconcile loop finds no running container.
type noPodStatus struct{}

func (noPodStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

// noRuntime is the container runtime the CPU Manager would push cpusets to.
type noRuntime struct{}

func (noRuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}
