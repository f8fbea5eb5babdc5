package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
)

// fixtureDir holds the kubelet's CPU manager fixture machines as topology JSON
// (shared/fixtures/topologies, beside the repository).
var fixtureDir = filepath.Join("..", "..", "..", "shared", "fixtures", "topologies")

func fixture(t *testing.T, name string) json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return data
}

// withMemory adds a numa section: mem per node, hugepages (page size → total) and distances 10
// to itself, 20 to the others.
func withMemory(t *testing.T, raw json.RawMessage, mem string, hugepages map[string]string) json.RawMessage {
	t.Helper()
	var doc struct {
		CPUs []map[string]int `json:"cpus"`
		NUMA []map[string]any `json:"numa"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, c := range doc.CPUs {
		ids[c["numa"]] = true
	}
	for id := range len(ids) {
		var dist []int
		for j := range len(ids) {
			dist = append(dist, map[bool]int{true: 10, false: 20}[id == j])
		}
		doc.NUMA = append(doc.NUMA, map[string]any{"id": id, "memory": mem, "hugepages": hugepages, "distances": dist})
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkMachine converts a fixture and checks the MachineInfo and the CPU Manager's own reading
// of it (topology.Discover) against the JSON, computed independently here.
func checkMachine(t *testing.T, name string, cpus, cores, sockets, numaNodes int) {
	raw := withMemory(t, fixture(t, name), "16Gi", map[string]string{"2Mi": "1Gi", "1Gi": "0"})
	mi, err := machineInfo(raw)
	if err != nil {
		t.Fatal(err)
	}
	if mi.NumCores != cpus || mi.NumPhysicalCores != cores || mi.NumSockets != sockets || len(mi.Topology) != numaNodes {
		t.Fatalf("MachineInfo: %d cpus, %d cores, %d sockets, %d nodes; want %d, %d, %d, %d",
			mi.NumCores, mi.NumPhysicalCores, mi.NumSockets, len(mi.Topology), cpus, cores, sockets, numaNodes)
	}
	if want := uint64(numaNodes) * 16 << 30; mi.MemoryCapacity != want {
		t.Errorf("MemoryCapacity %d, want %d", mi.MemoryCapacity, want)
	}
	for i, n := range mi.Topology {
		if n.Id != i || n.Memory != 16<<30 || len(n.Distances) != numaNodes || n.Distances[i] != 10 {
			t.Errorf("node %d: id %d memory %d distances %v", i, n.Id, n.Memory, n.Distances)
		}
		if len(n.HugePages) != 2 || n.HugePages[0].PageSize != 2048 || n.HugePages[0].NumPages != 512 ||
			n.HugePages[1].PageSize != 1<<20 || n.HugePages[1].NumPages != 0 {
			t.Errorf("node %d hugepages %+v", i, n.HugePages)
		}
	}
	if len(mi.HugePages) != 2 || mi.HugePages[0].NumPages != uint64(512*numaNodes) {
		t.Errorf("machine hugepages %+v", mi.HugePages)
	}

	var doc struct {
		CPUs []struct{ ID, Core, Socket, NUMA, Uncore int } `json:"cpus"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	lowest := map[[2]int]int{} // (socket, core) → lowest CPU id: the kubelet's core id
	for _, c := range doc.CPUs {
		k := [2]int{c.Socket, c.Core}
		if id, ok := lowest[k]; !ok || c.ID < id {
			lowest[k] = c.ID
		}
	}
	topo, err := topology.Discover(klog.Background(), mi)
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumCPUs != cpus || topo.NumCores != cores || topo.NumSockets != sockets || topo.NumNUMANodes != numaNodes {
		t.Errorf("Discover: %+v", topo)
	}
	for _, c := range doc.CPUs {
		got, ok := topo.CPUDetails[c.ID]
		if !ok {
			t.Errorf("cpu %d missing", c.ID)
			continue
		}
		if got.NUMANodeID != c.NUMA || got.SocketID != c.Socket || got.UncoreCacheID != c.Uncore || got.CoreID != lowest[[2]int{c.Socket, c.Core}] {
			t.Errorf("cpu %d: kubelet sees %+v; json %+v", c.ID, got, c)
		}
	}
}

func TestMachineDualSocketHT(t *testing.T) {
	checkMachine(t, "topoDualSocketHT.json", 12, 6, 2, 2)
}

func TestMachineDualSocketMultiNumaPerSocketHT(t *testing.T) {
	checkMachine(t, "topoDualSocketMultiNumaPerSocketHT.json", 80, 40, 2, 4)
}

func TestMachineWithoutNUMASection(t *testing.T) {
	mi, err := machineInfo(fixture(t, "topoDualSocketHT.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(mi.Topology) != 2 || mi.MemoryCapacity != 0 || mi.Topology[1].Distances != nil {
		t.Errorf("nodes derived from the cpus: %+v", mi.Topology)
	}
}

func TestMachineRefusesBadTopology(t *testing.T) {
	for name, raw := range map[string]string{
		"no cpu":       `{"cpus": []}`,
		"unknown numa": `{"cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 1}], "numa": [{"id": 0}]}`,
		"twice":        `{"cpus": [{"id": 0, "core": 0, "socket": 0}, {"id": 0, "core": 1, "socket": 0}]}`,
		"bad json":     `{"cpus": 3}`,
	} {
		if _, err := machineInfo(json.RawMessage(raw)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
