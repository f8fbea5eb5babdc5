package main

// machine.go: numa-shim's topology JSON → the cAdvisor MachineInfo the kubelet's managers read.

import (
	"encoding/json"
	"fmt"
	"sort"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"k8s.io/apimachinery/pkg/api/resource"
)

// topologyJSON is numa-shim's topology JSON (shared/spec/README.md). `die` is accepted and ignored:
// cAdvisor's MachineInfo has no dies.
type topologyJSON struct {
	CPUs []struct {
		ID     int `json:"id"`
		Core   int `json:"core"`
		Socket int `json:"socket"`
		Die    int `json:"die"`
		NUMA   int `json:"numa"`
		Uncore int `json:"uncore"`
	} `json:"cpus"`
	NUMA []struct {
		ID        int                          `json:"id"`
		Memory    resource.Quantity            `json:"memory"`
		Hugepages map[string]resource.Quantity `json:"hugepages"`
		Distances []uint64                     `json:"distances"`
	} `json:"numa"`
}

// machineInfo builds the MachineInfo cAdvisor would report for the machine: one Node per NUMA
// node (memory, hugepages as page size in KiB and page count, distances), one Core per distinct
// (NUMA node, socket, core id) with its CPUs as Threads and its uncore id as the core's L3 cache,
// NumCores = logical CPUs, NumPhysicalCores, NumSockets, MemoryCapacity and HugePages summed.
// Without `numa` the nodes come from the CPUs' NUMA ids with no memory and no distances.
func machineInfo(raw json.RawMessage) (*cadvisorapi.MachineInfo, error) {
	var t topologyJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if len(t.CPUs) == 0 {
		return nil, fmt.Errorf("topology: no cpu")
	}
	nodes := map[int]*cadvisorapi.Node{}
	if t.NUMA == nil {
		for _, c := range t.CPUs {
			nodes[c.NUMA] = &cadvisorapi.Node{Id: c.NUMA}
		}
	}
	for _, n := range t.NUMA {
		if _, dup := nodes[n.ID]; dup {
			return nil, fmt.Errorf("topology: numa node %d is listed twice", n.ID)
		}
		node := &cadvisorapi.Node{Id: n.ID, Memory: uint64(n.Memory.Value()), Distances: n.Distances}
		for size, total := range n.Hugepages {
			page, err := resource.ParseQuantity(size)
			if err != nil || page.Value() <= 0 {
				return nil, fmt.Errorf("topology: numa node %d: hugepage size %q", n.ID, size)
			}
			node.HugePages = append(node.HugePages, cadvisorapi.HugePagesInfo{
				PageSize: uint64(page.Value()) / 1024,
				NumPages: uint64(total.Value() / page.Value()),
			})
		}
		sort.Slice(node.HugePages, func(i, j int) bool { return node.HugePages[i].PageSize < node.HugePages[j].PageSize })
		nodes[n.ID] = node
	}

	type coreKey struct{ numa, socket, core int }
	cores := map[coreKey]*cadvisorapi.Core{}
	var order []coreKey
	seen := map[int]bool{}
	sockets := map[int]bool{}
	for _, c := range t.CPUs {
		if seen[c.ID] {
			return nil, fmt.Errorf("topology: cpu %d is listed twice", c.ID)
		}
		seen[c.ID] = true
		if nodes[c.NUMA] == nil {
			return nil, fmt.Errorf("topology: cpu %d is on numa node %d, which is not in the numa list", c.ID, c.NUMA)
		}
		sockets[c.Socket] = true
		k := coreKey{c.NUMA, c.Socket, c.Core}
		core := cores[k]
		if core == nil {
			core = &cadvisorapi.Core{
				Id:           c.Core,
				SocketID:     c.Socket,
				UncoreCaches: []cadvisorapi.Cache{{Id: c.Uncore, Type: "Unified", Level: 3}},
			}
			cores[k] = core
			order = append(order, k)
		} else if core.UncoreCaches[0].Id != c.Uncore {
			return nil, fmt.Errorf("topology: cpus of core %d on socket %d have different uncore ids", c.Core, c.Socket)
		}
		core.Threads = append(core.Threads, c.ID)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.socket != b.socket {
			return a.socket < b.socket
		}
		return a.core < b.core
	})
	for _, k := range order {
		sort.Ints(cores[k].Threads)
		nodes[k.numa].Cores = append(nodes[k.numa].Cores, *cores[k])
	}

	mi := &cadvisorapi.MachineInfo{
		NumCores:         len(t.CPUs),
		NumPhysicalCores: len(cores),
		NumSockets:       len(sockets),
	}
	hugepages := map[uint64]uint64{}
	var ids []int
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		n := nodes[id]
		mi.MemoryCapacity += n.Memory
		for _, hp := range n.HugePages {
			hugepages[hp.PageSize] += hp.NumPages
		}
		mi.Topology = append(mi.Topology, *n)
	}
	for size, pages := range hugepages {
		mi.HugePages = append(mi.HugePages, cadvisorapi.HugePagesInfo{PageSize: size, NumPages: pages})
	}
	sort.Slice(mi.HugePages, func(i, j int) bool { return mi.HugePages[i].PageSize < mi.HugePages[j].PageSize })
	return mi, nil
}
