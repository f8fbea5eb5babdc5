package main

// steps.go: a case (PROTOCOL.md) run step by step against one node's managers.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Case is one scenario of PROTOCOL.md.
type Case struct {
	ID       string          `json:"id"`
	Topology json.RawMessage `json:"topology"`
	Kubelet  json.RawMessage `json:"kubelet"`
	// Devices: device plugin resource name → its devices, each advertised by a stub plugin.
	Devices map[string][]CaseDevice `json:"devices,omitempty"`
	Steps   []Step                  `json:"steps"`
}

// Step is one of admit (with an optional "start": false), start or remove.
type Step struct {
	Admit  json.RawMessage `json:"admit,omitempty"`
	Start  json.RawMessage `json:"start,omitempty"`
	Remove *RemoveStep     `json:"remove,omitempty"`
}

// StartStep starts named containers of an admitted pod, in the order given.
type StartStep struct {
	Pod        string   `json:"pod"`
	Containers []string `json:"containers"`
}

// RemoveStep stops one started container, or (without Container) deletes the pod.
type RemoveStep struct {
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"`
}

// podRecord is one pod of the case as the API server and the kubelet know it.
type podRecord struct {
	key      string // namespace/name
	pod      *v1.Pod
	admitted bool
	reason   string
	message  string
	apiError string
	running  map[string]started // started, not removed containers by name
	removed  map[string]bool    // containers removed and not started again
	starts   int                // container starts so far
}

// started is a container the kubelet started: its container ID and start sequence number.
type started struct {
	id  string
	seq int
}

// caseRun is the state of one case in progress.
type caseRun struct {
	ctx    context.Context
	logger klog.Logger
	node   *node
	pods   []*podRecord // not removed, in order of first admission
	admits int
}

// runCase runs c and returns its answer; it never panics on bad input.
func runCase(ctx context.Context, c *Case, stateRoot string) (ans Answer) {
	ans.ID = c.ID
	defer func() {
		if r := recover(); r != nil {
			ans = Answer{ID: c.ID, Error: fmt.Sprintf("the kubelet's code panicked: %v", r)}
		}
	}()
	mi, err := machineInfo(c.Topology)
	if err != nil {
		return Answer{ID: c.ID, Error: err.Error()}
	}
	kc, gates, err := loadConfig(ctx, c.Kubelet)
	defer resetFeatureGates(gates)
	if err != nil {
		return Answer{ID: c.ID, ConfigError: err.Error()}
	}
	logger := klog.FromContext(ctx)
	nc, err := newNodeConfig(logger, kc, mi)
	if err != nil {
		return Answer{ID: c.ID, ConfigError: err.Error()}
	}
	dir, err := os.MkdirTemp(stateRoot, "kubelet-oracle-")
	if err != nil {
		return Answer{ID: c.ID, Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	n, err := newNode(ctx, mi, nc, dir, c.Devices)
	if err != nil {
		return Answer{ID: c.ID, ConfigError: err.Error()}
	}
	defer n.stop(logger)

	r := &caseRun{ctx: ctx, logger: logger, node: n}
	for i, step := range c.Steps {
		if err := r.step(&step); err != nil {
			return Answer{ID: c.ID, Error: fmt.Sprintf("step %d: %v", i, err)}
		}
		r.node.sweep(logger)
		ans.Steps = append(ans.Steps, r.snapshot(kc.MemoryManagerPolicy))
	}
	return ans
}

func (r *caseRun) step(s *Step) error {
	switch {
	case s.Admit != nil && s.Remove == nil:
		start := true
		if s.Start != nil {
			if err := json.Unmarshal(s.Start, &start); err != nil {
				return fmt.Errorf("admit: start must be true or false")
			}
		}
		return r.admit(s.Admit, start)
	case s.Start != nil && s.Remove == nil:
		var st StartStep
		if err := json.Unmarshal(s.Start, &st); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		rec, err := r.admitted(st.Pod)
		if err != nil {
			return err
		}
		return r.start(rec, st.Containers)
	case s.Remove != nil && s.Admit == nil && s.Start == nil:
		return r.remove(s.Remove)
	}
	return fmt.Errorf("a step has exactly one of admit, start, remove")
}

// admit sends the pod to the API server, then (when it is created) through the kubelet's
// admission, and starts all its containers unless start is false.
func (r *caseRun) admit(manifest []byte, start bool) error {
	r.admits++
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", r.admits))
	pod, err := createPod(r.ctx, manifest, uid)
	if err != nil {
		rec, key := &podRecord{apiError: err.Error()}, manifestKey(manifest)
		rec.key = key
		r.pods = append(r.pods, rec)
		return nil
	}
	rec := &podRecord{key: pod.Namespace + "/" + pod.Name, pod: pod, running: map[string]started{}, removed: map[string]bool{}}
	if r.find(rec.key) != nil {
		rec.pod, rec.apiError = nil, errors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, pod.Name).Error()
		r.pods = append(r.pods, rec)
		return nil
	}
	r.pods = append(r.pods, rec)

	r.node.active.add(pod)
	result := r.node.admit(r.ctx, pod)
	if !result.Admit {
		// The kubelet rejects the pod; it leaves the active pods and what was allocated for it
		// before the refusal is swept.
		rec.reason, rec.message = result.Reason, result.Message
		r.node.active.remove(pod.UID)
		return nil
	}
	rec.admitted = true
	if !start {
		return nil
	}
	var names []string
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		names = append(names, c.Name)
	}
	return r.start(rec, names)
}

// start runs PreStartContainer for each named container in order (a container started again is a
// restart with a new container ID).
func (r *caseRun) start(rec *podRecord, names []string) error {
	for _, name := range names {
		c := container(rec.pod, name)
		if c == nil {
			return fmt.Errorf("pod %s has no container %q", rec.key, name)
		}
		if err := startDevicesOf(r.ctx, r.node.deviceManager, rec.pod, c); err != nil {
			// The kubelet cannot make the container's run options: it is not created.
			fmt.Fprintf(os.Stderr, "kubelet-oracle: pod %s container %s not started: %v\n", rec.key, name, err)
			continue
		}
		rec.starts++
		id := fmt.Sprintf("%s-%d-%s", rec.pod.UID, rec.starts, name)
		r.node.preStartContainer(r.logger, rec.pod, c, id)
		rec.running[name] = started{id: id, seq: rec.starts}
		delete(rec.removed, name)
	}
	return nil
}

// remove stops one container (PostStopContainer), or deletes the pod: its started containers stop
// in start order, then it leaves the active pods (the sweep after the step frees its resources).
func (r *caseRun) remove(s *RemoveStep) error {
	key := podKey(s.Pod)
	rec := r.find(key)
	if rec == nil {
		for _, p := range r.pods {
			if p.key == key {
				rec = p // a pod the API server refused
				break
			}
		}
	}
	if rec == nil {
		return fmt.Errorf("remove: no pod %s", s.Pod)
	}
	if s.Container != "" {
		c, ok := rec.running[s.Container]
		if !ok {
			return fmt.Errorf("remove: container %q of pod %s is not running", s.Container, rec.key)
		}
		r.node.postStopContainer(r.logger, c.id)
		delete(rec.running, s.Container)
		rec.removed[s.Container] = true
		return nil
	}
	if rec.pod != nil {
		for _, c := range startOrder(rec.running) {
			r.node.postStopContainer(r.logger, c.id)
		}
		r.node.active.remove(rec.pod.UID)
	}
	for i, p := range r.pods {
		if p == rec {
			r.pods = append(r.pods[:i], r.pods[i+1:]...)
			break
		}
	}
	return nil
}

func (r *caseRun) find(key string) *podRecord {
	for _, p := range r.pods {
		if p.key == key && p.apiError == "" {
			return p
		}
	}
	return nil
}

func (r *caseRun) admitted(name string) (*podRecord, error) {
	rec := r.find(podKey(name))
	if rec == nil || !rec.admitted {
		return nil, fmt.Errorf("no admitted pod %s", name)
	}
	return rec, nil
}

// podKey names a pod namespace/name; a name alone is in "default".
func podKey(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return "default/" + name
}

// manifestKey names a pod the API server refused, from whatever metadata it has.
func manifestKey(manifest []byte) string {
	var m struct {
		Metadata struct{ Name, Namespace string } `json:"metadata"`
	}
	_ = json.Unmarshal(manifest, &m)
	if m.Metadata.Namespace == "" {
		m.Metadata.Namespace = "default"
	}
	return m.Metadata.Namespace + "/" + m.Metadata.Name
}

// startOrder lists running containers by start sequence.
func startOrder(running map[string]started) []started {
	list := slices.Collect(maps.Values(running))
	slices.SortFunc(list, func(a, b started) int { return a.seq - b.seq })
	return list
}

func container(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}
