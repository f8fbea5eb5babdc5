package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type podOptions struct {
	pods         int
	image        string
	cgroupParent string
	logDir       string
}

// A Guaranteed pod with pod-level resources as the kubelet describes it to CRI: a 1-CPU,
// 128 MiB budget in the sandbox's linux.resources, and one container asking for 1 whole CPU
// and 64 MiB (numa-shim with the static CPU policy gives it an exclusive CPU).
const (
	podMemory       = 128 << 20
	containerMemory = 64 << 20
)

func oneCPU(memory int64) *rt.LinuxContainerResources {
	return &rt.LinuxContainerResources{
		CpuPeriod:          100_000,
		CpuQuota:           100_000,
		CpuShares:          1024,
		MemoryLimitInBytes: memory,
		OomScoreAdj:        -997,
	}
}

func sandboxConfig(name, uid string, o podOptions) *rt.PodSandboxConfig {
	return &rt.PodSandboxConfig{
		Metadata:     &rt.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "bench"},
		LogDirectory: filepath.Join(o.logDir, uid),
		Labels:       map[string]string{"io.kubernetes.pod.uid": uid},
		Linux: &rt.LinuxPodSandboxConfig{
			CgroupParent: fmt.Sprintf("%s/pod%s", o.cgroupParent, uid),
			SecurityContext: &rt.LinuxSandboxSecurityContext{
				NamespaceOptions: &rt.NamespaceOption{Network: rt.NamespaceMode_NODE},
			},
			Resources: oneCPU(podMemory),
			Overhead:  &rt.LinuxContainerResources{},
		},
	}
}

func containerConfig(uid string, o podOptions) *rt.ContainerConfig {
	return &rt.ContainerConfig{
		Metadata: &rt.ContainerMetadata{Name: "app"},
		Image:    &rt.ImageSpec{Image: o.image},
		Command:  []string{"sleep", "3600"},
		LogPath:  "app.log",
		Labels: map[string]string{
			"io.kubernetes.pod.uid":        uid,
			"io.kubernetes.container.name": "app",
		},
		Linux: &rt.LinuxContainerConfig{Resources: oneCPU(containerMemory)},
	}
}

// call runs one CRI call with the kubelet's per-call deadline and returns how long it took.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t0 := time.Now()
	v, err := f(cctx)
	return v, time.Since(t0), err
}

// onePod times RunPodSandbox + CreateContainer + StartContainer, then stops and removes the pod
// (untimed). The phase times are returned in ms: run, create, start.
func onePod(ctx context.Context, c rt.RuntimeServiceClient, name, uid string, o podOptions) ([3]float64, error) {
	var ms [3]float64
	config := sandboxConfig(name, uid, o)
	if err := os.MkdirAll(config.LogDirectory, 0o755); err != nil {
		return ms, err
	}
	run, d0, err := call(ctx, func(ctx context.Context) (*rt.RunPodSandboxResponse, error) {
		return c.RunPodSandbox(ctx, &rt.RunPodSandboxRequest{Config: config})
	})
	if err != nil {
		return ms, fmt.Errorf("RunPodSandbox %s: %w", name, err)
	}
	sandbox := run.PodSandboxId
	defer func() {
		// Untimed; StopPodSandbox stops the container too.
		_, _, _ = call(ctx, func(ctx context.Context) (*rt.StopPodSandboxResponse, error) {
			return c.StopPodSandbox(ctx, &rt.StopPodSandboxRequest{PodSandboxId: sandbox})
		})
		_, _, _ = call(ctx, func(ctx context.Context) (*rt.RemovePodSandboxResponse, error) {
			return c.RemovePodSandbox(ctx, &rt.RemovePodSandboxRequest{PodSandboxId: sandbox})
		})
	}()
	created, d1, err := call(ctx, func(ctx context.Context) (*rt.CreateContainerResponse, error) {
		return c.CreateContainer(ctx, &rt.CreateContainerRequest{
			PodSandboxId: sandbox, Config: containerConfig(uid, o), SandboxConfig: config,
		})
	})
	if err != nil {
		return ms, fmt.Errorf("CreateContainer %s: %w", name, err)
	}
	_, d2, err := call(ctx, func(ctx context.Context) (*rt.StartContainerResponse, error) {
		return c.StartContainer(ctx, &rt.StartContainerRequest{ContainerId: created.ContainerId})
	})
	if err != nil {
		return ms, fmt.Errorf("StartContainer %s: %w", name, err)
	}
	for i, d := range []time.Duration{d0, d1, d2} {
		ms[i] = float64(d.Nanoseconds()) / 1e6
	}
	return ms, nil
}

// runPods starts pod i on every target in rotated order (one untimed pod per target first), so
// that pod i of each target ran back to back and can be compared pairwise.
func runPods(ctx context.Context, ts targets, o podOptions) error {
	if o.image == "" || o.cgroupParent == "" || o.logDir == "" {
		return fmt.Errorf("pods needs -image, -cgroup-parent and -log-dir")
	}
	clients := make([]rt.RuntimeServiceClient, len(ts))
	for i, tg := range ts {
		client, conn, err := dial(tg.socket)
		if err != nil {
			return err
		}
		defer conn.Close()
		clients[i] = client
	}
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	for p := 0; p <= o.pods; p++ {
		for _, i := range rotated(order, p) {
			name := fmt.Sprintf("bench-%s-%d", ts[i].name, p)
			uid := fmt.Sprintf("%s-%d-%d", ts[i].name, os.Getpid(), p)
			ms, err := onePod(ctx, clients[i], name, uid, o)
			if err != nil {
				return err
			}
			if p == 0 {
				continue
			}
			emit(map[string]any{
				"test": "pod", "target": ts[i].name, "i": p,
				"total_ms": ms[0] + ms[1] + ms[2], "run_ms": ms[0], "create_ms": ms[1], "start_ms": ms[2],
			})
		}
	}
	return nil
}
