package main

// answer.go: what the managers decided, read through their own getters (the ones the kubelet's
// PreCreateContainer and PodResources server use), as PROTOCOL.md's answer.

import (
	"cmp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/utils/cpuset"
)

// Answer is the reply to one case.
type Answer struct {
	ID          string     `json:"id"`
	Error       string     `json:"error,omitempty"`
	ConfigError string     `json:"configError,omitempty"`
	Steps       []Snapshot `json:"steps,omitempty"`
}

// Snapshot is the node after one step.
type Snapshot struct {
	Pods []PodAnswer `json:"pods"`
	Node NodeAnswer  `json:"node"`
}

// PodAnswer is one pod: its admission and, when admitted, its resources.
type PodAnswer struct {
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	Admitted   bool              `json:"admitted"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	APIError   string            `json:"apiError,omitempty"`
	CPUs       string            `json:"cpus,omitempty"`
	Memory     []Block           `json:"memory,omitempty"`
	Containers []ContainerAnswer `json:"containers"`
}

// ContainerAnswer is one container of an admitted pod.
type ContainerAnswer struct {
	Name            string  `json:"name"`
	CPUs            string  `json:"cpus"`
	Isolation       string  `json:"isolation"`
	MemoryNodes     string  `json:"memoryNodes,omitempty"`
	Memory          []Block `json:"memory,omitempty"`
	MemoryIsolation string  `json:"memoryIsolation"`
	// Devices: GetDevices (PodResources' devices), resource → ids ascending.
	Devices map[string][]string `json:"devices,omitempty"`
}

// Block is a Memory Manager block: a size of one memory type on a set of NUMA nodes.
type Block struct {
	Type string `json:"type"`
	Size uint64 `json:"size"`
	NUMA string `json:"numa"`
}

// NodeAnswer is the node-wide state of the managers.
type NodeAnswer struct {
	SharedCPUs string       `json:"sharedCPUs"`
	Memory     []NodeMemory `json:"memory,omitempty"`
}

// NodeMemory is the Memory Manager's machine state for one NUMA node and memory type.
type NodeMemory struct {
	NUMA        int    `json:"numa"`
	Type        string `json:"type"`
	Allocatable uint64 `json:"allocatable"`
	Free        uint64 `json:"free"`
	Reserved    uint64 `json:"reserved"`
}

func (r *caseRun) snapshot(memoryPolicy string) Snapshot {
	n := r.node
	snap := Snapshot{Pods: []PodAnswer{}}
	for _, rec := range r.pods {
		pa := PodAnswer{Reason: rec.reason, Message: rec.message, APIError: rec.apiError, Containers: []ContainerAnswer{}}
		pa.Namespace, pa.Name = splitKey(rec.key)
		if rec.admitted {
			pa.Admitted = true
			uid := string(rec.pod.UID)
			pa.CPUs = n.cpuManager.GetPodCPUs(uid).String()
			pa.Memory = blocks(n.memoryManager.GetPodMemory(uid))
			for _, c := range append(append([]v1.Container{}, rec.pod.Spec.InitContainers...), rec.pod.Spec.Containers...) {
				if rec.removed[c.Name] {
					continue
				}
				pa.Containers = append(pa.Containers, ContainerAnswer{
					Name:            c.Name,
					CPUs:            n.cpuManager.GetCPUAffinity(uid, c.Name).String(),
					Isolation:       string(n.cpuManager.GetResourceIsolationLevel(rec.pod, &c)),
					MemoryNodes:     numaList(n.memoryManager.GetMemoryNUMANodes(r.logger, rec.pod, &c).UnsortedList()),
					Memory:          blocks(n.memoryManager.GetMemory(r.logger, uid, c.Name)),
					MemoryIsolation: string(n.memoryManager.GetResourceIsolationLevel(rec.pod, &c)),
					Devices:         containerDevices(n.deviceManager, uid, c.Name),
				})
			}
		}
		snap.Pods = append(snap.Pods, pa)
	}
	snap.Node.SharedCPUs = n.cpuManager.State().GetDefaultCPUSet().String()
	if memoryPolicy == "Static" {
		for id, node := range n.memoryManager.State().GetMachineState() {
			for typ, t := range node.MemoryMap {
				snap.Node.Memory = append(snap.Node.Memory, NodeMemory{
					NUMA: id, Type: string(typ), Allocatable: t.Allocatable, Free: t.Free, Reserved: t.Reserved,
				})
			}
		}
		slices.SortFunc(snap.Node.Memory, func(a, b NodeMemory) int {
			return cmp.Or(cmp.Compare(a.NUMA, b.NUMA), cmp.Compare(a.Type, b.Type))
		})
	}
	return snap
}

// blocks lists memory blocks by type (the managers keep them in map order).
func blocks(in []state.Block) []Block {
	var out []Block
	for _, b := range in {
		out = append(out, Block{Type: string(b.Type), Size: b.Size, NUMA: numaList(b.NUMAAffinity)})
	}
	slices.SortFunc(out, func(a, b Block) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.NUMA, b.NUMA)) })
	return out
}

// numaList formats NUMA node ids in the Linux list format.
func numaList(ids []int) string {
	return cpuset.New(ids...).String()
}

func splitKey(key string) (string, string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}
