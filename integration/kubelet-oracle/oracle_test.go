package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/cpuset"
)

// The tutorial's node: topoDualSocketHT (NUMA node = socket = CPU parity), 16Gi per NUMA node.
func tutorialMachine(t *testing.T) json.RawMessage {
	return withMemory(t, fixture(t, "topoDualSocketHT.json"), "16Gi", nil)
}

// kubelet settings of docs/examples/kubelet-pod-scope.yaml with the reservations the kubelet
// accepts: CPU 0 for the system, 100Mi of node 0 (= the default memory.available eviction).
func tutorialKubelet(scope string, overrides map[string]any) json.RawMessage {
	k := map[string]any{
		"featureGates":          map[string]bool{"PodLevelResources": true, "PodLevelResourceManagers": true},
		"cpuManagerPolicy":      "static",
		"memoryManagerPolicy":   "Static",
		"topologyManagerPolicy": "single-numa-node",
		"topologyManagerScope":  scope,
		"reservedSystemCPUs":    "0",
		"reservedMemory":        []any{map[string]any{"numaNode": 0, "limits": map[string]string{"memory": "100Mi"}}},
	}
	for key, v := range overrides {
		k[key] = v
	}
	data, _ := json.Marshal(k)
	return data
}

func exclusive(name, cpu, mem string) v1.Container {
	rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
	return v1.Container{Name: name, Image: "busybox", Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}
}

func plain(name string) v1.Container { return v1.Container{Name: name, Image: "busybox"} }

func sidecar(c v1.Container) v1.Container {
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// manifest is a pod as a client sends it; budget "cpu/memory" sets pod-level resources.
func manifest(t *testing.T, name, budget string, init []v1.Container, containers ...v1.Container) json.RawMessage {
	t.Helper()
	p := v1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.PodSpec{InitContainers: init, Containers: containers},
	}
	if budget != "" {
		cpu, mem, _ := strings.Cut(budget, "/")
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
		p.Spec.Resources = &v1.ResourceRequirements{Requests: rl, Limits: rl}
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func admit(m json.RawMessage) Step { return Step{Admit: m} }

func admitNoStart(m json.RawMessage) Step { return Step{Admit: m, Start: json.RawMessage("false")} }

func startStep(pod string, containers ...string) Step {
	data, _ := json.Marshal(StartStep{Pod: pod, Containers: containers})
	return Step{Start: data}
}

func removeStep(pod, container string) Step {
	return Step{Remove: &RemoveStep{Pod: pod, Container: container}}
}

func run(t *testing.T, c *Case) Answer {
	t.Helper()
	ctx := klog.NewContext(context.Background(), logr.Discard())
	ans := runCase(ctx, c, t.TempDir())
	if ans.Error != "" {
		t.Fatalf("case %s: %s", c.ID, ans.Error)
	}
	return ans
}

func onlyPod(t *testing.T, s Snapshot) PodAnswer {
	t.Helper()
	if len(s.Pods) != 1 {
		t.Fatalf("pods %+v", s.Pods)
	}
	return s.Pods[0]
}

func reservedMemory(s Snapshot, numa int) uint64 {
	for _, m := range s.Node.Memory {
		if m.NUMA == numa && m.Type == "memory" {
			return m.Reserved
		}
	}
	return 1<<64 - 1
}

func mustParse(s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return set
}

// numaOf gives the NUMA nodes of a CPU set on topoDualSocketHT (node = CPU parity).
func numaOf(t *testing.T, cpus string) cpuset.CPUSet {
	set, err := cpuset.Parse(cpus)
	if err != nil {
		t.Fatalf("cpuset %q: %v", cpus, err)
	}
	var nodes []int
	for _, c := range set.List() {
		nodes = append(nodes, c%2)
	}
	return cpuset.New(nodes...)
}

// The tutorial's pod-scope pod: a 4-CPU, 4Gi budget on one NUMA node; main-app's 2 CPUs are its
// own, the two sidecars share the rest of the budget; the node keeps everything else.
func TestPodScopePodLevelPod(t *testing.T) {
	ans := run(t, &Case{ID: "pod-scope-mixed", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", nil), Steps: []Step{
		admit(manifest(t, "pod-scope-mixed", "4/4Gi",
			[]v1.Container{sidecar(plain("metrics-sidecar")), sidecar(plain("logging-sidecar"))},
			exclusive("main-app", "2", "2Gi"))),
	}})
	p := onlyPod(t, ans.Steps[0])
	if !p.Admitted {
		t.Fatalf("refused: %s %s", p.Reason, p.Message)
	}
	podCPUs := mustParse(p.CPUs)
	if podCPUs.Size() != 4 || numaOf(t, p.CPUs).Size() != 1 || podCPUs.Contains(0) {
		t.Fatalf("pod cpus %q: want 4 on one NUMA node, not the reserved CPU 0", p.CPUs)
	}
	node := numaOf(t, p.CPUs).List()[0]
	if len(p.Memory) != 1 || p.Memory[0] != (Block{Type: "memory", Size: 4 << 30, NUMA: numaList([]int{node})}) {
		t.Errorf("pod memory %+v", p.Memory)
	}
	byName := map[string]ContainerAnswer{}
	for _, c := range p.Containers {
		byName[c.Name] = c
	}
	main := byName["main-app"]
	mainCPUs := mustParse(main.CPUs)
	if main.Isolation != "container" || mainCPUs.Size() != 2 || !mainCPUs.IsSubsetOf(podCPUs) {
		t.Errorf("main-app %+v", main)
	}
	for _, name := range []string{"metrics-sidecar", "logging-sidecar"} {
		c := byName[name]
		if c.Isolation != "pod" || c.CPUs != podCPUs.Difference(mainCPUs).String() || c.MemoryNodes != numaList([]int{node}) {
			t.Errorf("%s %+v", name, c)
		}
	}
	if got, want := ans.Steps[0].Node.SharedCPUs, mustParse("0-11").Difference(podCPUs).String(); got != want {
		t.Errorf("sharedCPUs %q, want %q", got, want)
	}
	if reservedMemory(ans.Steps[0], node) != 4<<30 {
		t.Errorf("node memory %+v", ans.Steps[0].Node.Memory)
	}
}

// The tutorial's empty-shared-pool pod: its exclusive containers take the whole budget while a
// sidecar needs the pod's shared pool. The reason and message are the kubelet's, word for word.
func TestRefusedPodReasonAndMessage(t *testing.T) {
	pod := func() json.RawMessage {
		return manifest(t, "empty-shared-pool", "4/4Gi",
			[]v1.Container{sidecar(exclusive("metrics-sidecar", "1", "1Gi")), sidecar(plain("logging-sidecar"))},
			exclusive("main-app", "3", "3Gi"))
	}
	for _, tc := range []struct{ policy, reason, message string }{
		{"single-numa-node", "TopologyAffinityError", "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager"},
		{"best-effort", "EmptyPodSharedPoolError", "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"},
	} {
		ans := run(t, &Case{ID: tc.policy, Topology: tutorialMachine(t),
			Kubelet: tutorialKubelet("pod", map[string]any{"topologyManagerPolicy": tc.policy}), Steps: []Step{admit(pod())}})
		p := onlyPod(t, ans.Steps[0])
		if p.Admitted || p.Reason != tc.reason || p.Message != tc.message || len(p.Containers) != 0 {
			t.Errorf("%s: %+v", tc.policy, p)
		}
		if s := ans.Steps[0].Node; s.SharedCPUs != "0-11" || reservedMemory(ans.Steps[0], 0) != 0 {
			t.Errorf("%s: the refused pod holds resources: %+v", tc.policy, s)
		}
	}
}

// A container-scope refusal after the first containers were allocated: the kubelet leaves their
// CPUs in its state and frees them in removeStaleState; the snapshot is taken after that sweep.
func TestPartialAllocationOfARefusedPodIsSwept(t *testing.T) {
	ans := run(t, &Case{ID: "partial", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("container", nil), Steps: []Step{
		admit(manifest(t, "big", "", nil, exclusive("c1", "4", "1Gi"), exclusive("c2", "4", "1Gi"), exclusive("c3", "4", "1Gi"))),
	}})
	p := onlyPod(t, ans.Steps[0])
	if p.Admitted || p.Reason != "TopologyAffinityError" || p.Message != "Resources cannot be allocated with Topology locality" {
		t.Errorf("%+v", p)
	}
	if s := ans.Steps[0]; s.Node.SharedCPUs != "0-11" || reservedMemory(s, 0) != 0 || reservedMemory(s, 1) != 0 {
		t.Errorf("not swept: %+v", s.Node)
	}
}

func TestAPIServerRefusesPod(t *testing.T) {
	bad := exclusive("x", "2", "1Gi")
	bad.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")}
	ans := run(t, &Case{ID: "api", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", nil), Steps: []Step{
		admit(manifest(t, "bad", "", nil, bad)),
		admit(json.RawMessage(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo"}, "spec": {"containers": [{"name": "c", "image": "i", "resource": {}}]}}`)),
	}})
	pods := ans.Steps[1].Pods
	if len(pods) != 2 || pods[0].Admitted || pods[0].APIError != `Pod "bad" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1` {
		t.Errorf("%+v", pods)
	}
	if pods[1].Name != "typo" || pods[1].APIError != `strict decoding error: unknown field "spec.containers[0].resource"` {
		t.Errorf("%+v", pods[1])
	}
}

func TestConfigsTheKubeletRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		override map[string]any
		message  string
	}{
		{"reservedMemory is not kubeReserved+systemReserved+evictionHard", map[string]any{
			"reservedMemory": []any{map[string]any{"numaNode": 0, "limits": map[string]string{"memory": "1Gi"}}}},
			`the total amount "1Gi" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature`},
		{"unknown scope", map[string]any{"topologyManagerScope": "node"},
			`invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: "container", or "pod"`},
		{"reserved cpu off the machine", map[string]any{"reservedSystemCPUs": "12"},
			"reserved-cpus: 12 is not a subset of online-cpus: 0-11"},
		{"static policy without reserved cpus", map[string]any{"reservedSystemCPUs": ""},
			"[cpumanager] unable to determine reserved CPU resources for static policy"},
	} {
		ans := run(t, &Case{ID: tc.name, Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", tc.override)})
		if ans.ConfigError != tc.message || ans.Steps != nil {
			t.Errorf("%s: configError %q, want %q", tc.name, ans.ConfigError, tc.message)
		}
	}
}

// The kubelet's Memory Manager gives back a regular init container's memory when the pod's next
// container starts (memorymanager.AddContainer), not when the init container stops.
func TestInitContainerMemoryReleasedWhenNextContainerStarts(t *testing.T) {
	ans := run(t, &Case{ID: "init", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("container", nil), Steps: []Step{
		admitNoStart(manifest(t, "a", "", []v1.Container{exclusive("init", "2", "2Gi")}, exclusive("app", "1", "1Gi"))),
		startStep("default/a", "init"),
		removeStep("default/a", "init"),
		startStep("default/a", "app"),
	}})
	want := []uint64{2 << 30, 2 << 30, 2 << 30, 1 << 30}
	for i, s := range ans.Steps {
		if got := reservedMemory(s, 0); got != want[i] {
			t.Errorf("step %d: node 0 reserved %d, want %d", i, got, want[i])
		}
	}
	if c := onlyPod(t, ans.Steps[2]).Containers; len(c) != 1 || c[0].Name != "app" {
		t.Errorf("after removing init: %+v", c)
	}
}

// Deleting a pod-level pod returns its whole budget (CPUs and memory) to the node.
func TestRemovalReturnsPodBudget(t *testing.T) {
	ans := run(t, &Case{ID: "remove", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", nil), Steps: []Step{
		admit(manifest(t, "demo", "2/2Gi", nil, plain("worker"), plain("telemetry-sidecar"))),
		removeStep("demo", ""),
	}})
	admitted := onlyPod(t, ans.Steps[0])
	if mustParse(admitted.CPUs).Size() != 2 || ans.Steps[0].Node.SharedCPUs == "0-11" {
		t.Fatalf("admitted %+v, node %+v", admitted, ans.Steps[0].Node)
	}
	after := ans.Steps[1]
	if len(after.Pods) != 0 || after.Node.SharedCPUs != "0-11" || reservedMemory(after, 0) != 0 || reservedMemory(after, 1) != 0 {
		t.Errorf("after removal %+v", after)
	}
}

// Gates are set per case and reset after it: without PodLevelResourceManagers the same pod gets
// no pod-level CPUs.
func TestFeatureGatesResetBetweenCases(t *testing.T) {
	pod := manifest(t, "demo", "2/2Gi", nil, plain("worker"))
	on := run(t, &Case{ID: "on", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", nil), Steps: []Step{admit(pod)}})
	if onlyPod(t, on.Steps[0]).CPUs == "" {
		t.Fatalf("no pod-level cpus with the gate on: %+v", on)
	}
	off := run(t, &Case{ID: "off", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", map[string]any{"featureGates": map[string]bool{}}), Steps: []Step{admit(pod)}})
	if p := onlyPod(t, off.Steps[0]); !p.Admitted || p.CPUs != "" {
		t.Errorf("gate left on: %+v", p)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResourceManagers) {
		t.Errorf("PodLevelResourceManagers still enabled after the cases")
	}
}

// The same case gives the same answer, also after other cases ran.
func TestDeterministic(t *testing.T) {
	c := &Case{ID: "again", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("container", nil), Steps: []Step{
		admit(manifest(t, "a", "", nil, exclusive("a", "3", "1Gi"), plain("b"))),
		admit(manifest(t, "b", "4/4Gi", []v1.Container{sidecar(exclusive("s", "2", "2Gi"))}, plain("w1"), plain("w2"))),
		admit(manifest(t, "c", "", nil, exclusive("c", "5", "1Gi"))),
		removeStep("a", ""),
		admit(manifest(t, "d", "", nil, exclusive("d", "5", "1Gi"))),
	}}
	first, _ := json.Marshal(run(t, c))
	for range 5 {
		again, _ := json.Marshal(run(t, c))
		if !bytes.Equal(first, again) {
			t.Fatalf("answers differ:\n%s\n%s", first, again)
		}
	}
}

// Bad cases get an answer with error, in order, and the stream goes on.
func TestLinesNeverStopOnABadCase(t *testing.T) {
	good, _ := json.Marshal(&Case{ID: "good", Topology: tutorialMachine(t), Kubelet: tutorialKubelet("pod", nil)})
	in := strings.Join([]string{
		`not json`,
		`{"id": "typo", "topolgy": {}}`,
		`{"id": "no pod", "topology": {"cpus": [{"id": 0, "core": 0, "socket": 0}], "numa": [{"id": 0, "memory": "1Gi"}]}, "kubelet": {}, "steps": [{"remove": {"pod": "x"}}]}`,
		string(good),
	}, "\n")
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	o := &oracle{ctx: klog.NewContext(context.Background(), logr.Discard()), stateDir: t.TempDir()}
	if err := o.lines(strings.NewReader(in), w); err != nil {
		t.Fatal(err)
	}
	var answers []Answer
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var a Answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		answers = append(answers, a)
	}
	if len(answers) != 4 || answers[0].Error == "" || answers[1].ID != "typo" || answers[1].Error == "" ||
		answers[2].Error != "step 0: remove: no pod x" || answers[3].ID != "good" || answers[3].Error != "" {
		t.Errorf("%+v", answers)
	}
}

// The API server lists a pod-level budget's errors in map order; the answer must not flap.
func TestAPIErrorIsStable(t *testing.T) {
	m := manifest(t, "small", "1/1Gi", nil, exclusive("c", "2", "2Gi"))
	var first string
	for i := range 20 {
		_, err := createPod(context.Background(), m, "uid")
		if err == nil {
			t.Fatal("created")
		}
		if i == 0 {
			first = err.Error()
			if !strings.HasPrefix(first, `Pod "small" is invalid: [spec.resources.`) || strings.Count(first, "must be greater than or equal to aggregate container requests") != 2 {
				t.Fatalf("%s", first)
			}
		} else if err.Error() != first {
			t.Fatalf("message changed:\n%s\n%s", first, err)
		}
	}
}

// The case files in testdata run as files (YAML); only the docs' high-performance node as written
// is refused by the kubelet.
func TestTestdataCases(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(paths) < 4 {
		t.Fatalf("testdata: %v %v", paths, err)
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	o := &oracle{ctx: klog.NewContext(context.Background(), logr.Discard()), stateDir: t.TempDir()}
	if err := o.files(paths, w); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var a Answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatal(err)
		}
		refused := a.ID == "docs/high-performance-node"
		if a.Error != "" || (a.ConfigError != "") != refused || (!refused && len(a.Steps) == 0) {
			t.Errorf("%s: error %q configError %q, %d steps", a.ID, a.Error, a.ConfigError, len(a.Steps))
		}
	}
}
