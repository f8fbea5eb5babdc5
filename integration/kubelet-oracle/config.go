package main

// config.go: the case's KubeletConfiguration → feature gates and the arguments the kubelet's
// container manager hands its CPU, Memory and Topology Managers (cmd/kubelet/app/server.go run,
// pkg/kubelet/cm/container_manager_linux.go NewContainerManager).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	kubeletvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	utilcodec "k8s.io/kubernetes/pkg/kubelet/kubeletconfig/util/codec"
	"k8s.io/kubernetes/pkg/kubelet/stats/pidlimit"
	"k8s.io/utils/cpuset"
)

// kubeletCodecs are the codecs the kubelet's config file loader uses (configfiles.NewFsLoader).
var kubeletCodecs = func() *serializer.CodecFactory {
	_, codecs, err := kubeletscheme.NewSchemeAndCodecs(serializer.EnableStrict)
	if err != nil {
		panic(err)
	}
	return codecs
}()

// nodeConfig is the part of the kubelet's cm.NodeConfig the resource managers read.
type nodeConfig struct {
	kc                           *kubeletconfig.KubeletConfiguration
	reservedSystemCPUs           cpuset.CPUSet
	reservation                  v1.ResourceList // cm.GetNodeAllocatableReservation()
	topologyManagerPolicyOptions map[string]string
}

// loadConfig decodes the case's settings as the kubelet decodes its config file (strict, with
// v1beta1 defaulting, to the internal type; then loadConfigFile's evictionHard default), sets
// the feature gates it names on the kubelet's global gate and validates it as the kubelet does
// at start. The returned gates are the ones to reset after the case.
func loadConfig(ctx context.Context, raw json.RawMessage) (*kubeletconfig.KubeletConfiguration, map[string]bool, error) {
	doc := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, nil, fmt.Errorf("kubelet: %w", err)
		}
	}
	doc["apiVersion"] = "kubelet.config.k8s.io/v1beta1"
	doc["kind"] = "KubeletConfiguration"
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	kc, err := utilcodec.DecodeKubeletConfiguration(ctx, kubeletCodecs, data)
	if err != nil {
		return nil, nil, err
	}
	// cmd/kubelet/app/server.go loadConfigFile.
	if kc.EvictionHard == nil {
		kc.EvictionHard = maps.Clone(eviction.DefaultEvictionHard)
	} else if kc.MergeDefaultEvictionSettings {
		for k, v := range eviction.DefaultEvictionHard {
			if _, exists := kc.EvictionHard[k]; !exists {
				kc.EvictionHard[k] = v
			}
		}
	}
	// The host's cgroup version is not part of a case: validate as on a cgroup v2 node.
	kc.FailCgroupV1 = false

	gates := kc.FeatureGates
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		return nil, gates, fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
	}
	if err := kubeletvalidation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		return nil, gates, err
	}
	return kc, gates, nil
}

// resetFeatureGates puts the gates a case set back to their defaults.
func resetFeatureGates(gates map[string]bool) {
	names := map[featuregate.Feature]bool{}
	for name := range gates {
		names[featuregate.Feature(name)] = true
		if name == "AllAlpha" || name == "AllBeta" {
			for f := range utilfeature.DefaultMutableFeatureGate.GetAll() {
				names[f] = true
			}
		}
	}
	for name := range names {
		_ = utilfeature.DefaultMutableFeatureGate.ResetFeatureValueToDefault(name)
	}
}

// newNodeConfig computes the reservations as cmd/kubelet/app/server.go run does before
// cm.NewContainerManager, and the node allocatable reservation as the container manager does.
func newNodeConfig(logger klog.Logger, kc *kubeletconfig.KubeletConfiguration, mi *cadvisorapi.MachineInfo) (*nodeConfig, error) {
	reservedSystemCPUs, err := getReservedCPUs(logger, mi, kc.ReservedSystemCPUs)
	if err != nil {
		return nil, err
	}
	if reservedSystemCPUs.Size() > 0 {
		if kc.KubeReserved != nil {
			delete(kc.KubeReserved, "cpu")
		}
		if kc.SystemReserved == nil {
			kc.SystemReserved = make(map[string]string)
		}
		kc.SystemReserved["cpu"] = strconv.Itoa(reservedSystemCPUs.Size())
	}
	kubeReserved, err := parseResourceList(kc.KubeReserved)
	if err != nil {
		return nil, fmt.Errorf("--kube-reserved value failed to parse: %w", err)
	}
	systemReserved, err := parseResourceList(kc.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("--system-reserved value failed to parse: %w", err)
	}
	hardEvictionThresholds, err := eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	var tmOptions map[string]string
	if utilfeature.DefaultFeatureGate.Enabled(features.TopologyManagerPolicyOptions) {
		tmOptions = kc.TopologyManagerPolicyOptions
	} else if kc.TopologyManagerPolicyOptions != nil {
		return nil, fmt.Errorf("topology manager policy options %v require feature gates %q enabled",
			kc.TopologyManagerPolicyOptions, features.TopologyManagerPolicyOptions)
	}
	capacity := cadvisor.CapacityFromMachineInfo(mi)
	return &nodeConfig{
		kc:                           kc,
		reservedSystemCPUs:           reservedSystemCPUs,
		reservation:                  nodeAllocatableReservation(capacity, kubeReserved, systemReserved, hardEvictionThresholds),
		topologyManagerPolicyOptions: tmOptions,
	}, nil
}

// getReservedCPUs is cmd/kubelet/app/server.go getReservedCPUs (unexported there).
func getReservedCPUs(logger klog.Logger, machineInfo *cadvisorapi.MachineInfo, cpus string) (cpuset.CPUSet, error) {
	emptyCPUSet := cpuset.New()
	if cpus == "" {
		return emptyCPUSet, nil
	}
	topo, err := topology.Discover(logger, machineInfo)
	if err != nil {
		return emptyCPUSet, fmt.Errorf("unable to discover CPU topology info: %s", err)
	}
	reservedCPUSet, err := cpuset.Parse(cpus)
	if err != nil {
		return emptyCPUSet, fmt.Errorf("unable to parse reserved-cpus list: %s", err)
	}
	allCPUSet := topo.CPUDetails.CPUs()
	if !reservedCPUSet.IsSubsetOf(allCPUSet) {
		return emptyCPUSet, fmt.Errorf("reserved-cpus: %s is not a subset of online-cpus: %s", cpus, allCPUSet.String())
	}
	return reservedCPUSet, nil
}

// parseResourceList is cmd/kubelet/app/server.go parseResourceList (unexported there).
func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	rl := make(v1.ResourceList)
	for k, v := range m {
		switch v1.ResourceName(k) {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, pidlimit.PIDs:
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("failed to parse quantity %q for %q resource: %w", v, k, err)
			}
			if q.Sign() == -1 {
				return nil, fmt.Errorf("resource quantity for %q cannot be negative: %v", k, v)
			}
			if v1.ResourceName(k) == v1.ResourceCPU {
				q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
			}
			rl[v1.ResourceName(k)] = q
		default:
			return nil, fmt.Errorf("cannot reserve %q resource", k)
		}
	}
	return rl, nil
}

// nodeAllocatableReservation is pkg/kubelet/cm GetNodeAllocatableReservation with
// hardEvictionReservation (methods and helpers of the unexported containerManagerImpl).
func nodeAllocatableReservation(capacity, kubeReserved, systemReserved v1.ResourceList, thresholds []evictionapi.Threshold) v1.ResourceList {
	var evictionReservation v1.ResourceList
	if len(thresholds) > 0 {
		evictionReservation = v1.ResourceList{}
		for _, threshold := range thresholds {
			if threshold.Operator != evictionapi.OpLessThan {
				continue
			}
			switch threshold.Signal {
			case evictionapi.SignalMemoryAvailable:
				memoryCapacity := capacity[v1.ResourceMemory]
				evictionReservation[v1.ResourceMemory] = *evictionapi.GetThresholdQuantity(threshold.Value, &memoryCapacity)
			case evictionapi.SignalNodeFsAvailable:
				storageCapacity := capacity[v1.ResourceEphemeralStorage]
				evictionReservation[v1.ResourceEphemeralStorage] = *evictionapi.GetThresholdQuantity(threshold.Value, &storageCapacity)
			}
		}
	}
	result := make(v1.ResourceList)
	for k := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		value.Add(systemReserved[k])
		value.Add(kubeReserved[k])
		value.Add(evictionReservation[k])
		if !value.IsZero() {
			result[k] = *value
		}
	}
	return result
}

// validateNodeAllocatable is pkg/kubelet/cm validateNodeAllocatable, which the container
// manager's Start runs after starting the CPU and Memory Managers.
func validateNodeAllocatable(capacity, reservation v1.ResourceList) error {
	var errors []string
	for _, k := range slices.Sorted(maps.Keys(reservation)) {
		v := reservation[k]
		value := capacity[k].DeepCopy()
		value.Sub(v)
		if value.Sign() < 0 {
			errors = append(errors, fmt.Sprintf("Resource %q has a reservation of %v but capacity of %v. Expected capacity >= reservation.", k, v, capacity[k]))
		}
	}
	if len(errors) > 0 {
		return fmt.Errorf("invalid Node Allocatable configuration. %s", strings.Join(errors, " "))
	}
	return nil
}
