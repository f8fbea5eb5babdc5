package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type versionOptions struct {
	clients []int
	rounds  int
	calls   int
	warmup  int
}

// clientSet is one target's connections for one client count.
type clientSet struct {
	target  target
	clients []rt.RuntimeServiceClient
}

// runVersion times Version calls: in every round, for every client count, one batch per target
// in rotated order. Each batch is `calls` calls split over closed-loop clients.
func runVersion(ctx context.Context, ts targets, runtimePid int, o versionOptions) error {
	sets := map[int][]clientSet{}
	for _, c := range o.clients {
		for _, tg := range ts {
			set := clientSet{target: tg}
			for i := 0; i < c; i++ {
				client, conn, err := dial(tg.socket)
				if err != nil {
					return err
				}
				defer conn.Close()
				set.clients = append(set.clients, client)
			}
			if _, err := batch(ctx, set.clients, o.warmup*c); err != nil {
				return fmt.Errorf("warm-up of %s: %w", tg.name, err)
			}
			sets[c] = append(sets[c], set)
		}
	}
	for r := 0; r < o.rounds; r++ {
		for _, c := range o.clients {
			for _, set := range rotated(sets[c], r) {
				if err := timedBatch(ctx, set, runtimePid, r, o.calls); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// timedBatch runs one batch and prints its latencies, throughput and CPU per call.
func timedBatch(ctx context.Context, set clientSet, runtimePid, round, calls int) error {
	proxy0, err := cpuNanos(set.target.pid)
	if err != nil {
		return err
	}
	runtime0, err := cpuNanos(runtimePid)
	if err != nil {
		return err
	}
	self0 := selfCPU()
	started := time.Now()
	samples, err := batch(ctx, set.clients, calls)
	wall := time.Since(started)
	if err != nil {
		return fmt.Errorf("%s, %d clients: %w", set.target.name, len(set.clients), err)
	}
	self1 := selfCPU()
	runtime1, err := cpuNanos(runtimePid)
	if err != nil {
		return err
	}
	proxy1, err := cpuNanos(set.target.pid)
	if err != nil {
		return err
	}
	n := float64(len(samples))
	row := latencyRow(samples)
	row["test"] = "version"
	row["target"] = set.target.name
	row["round"] = round
	row["clients"] = len(set.clients)
	row["calls_per_s"] = n / wall.Seconds()
	row["client_cpu_us_per_call"] = float64(self1-self0) / n / 1e3
	if set.target.pid != 0 {
		row["cpu_us_per_call"] = float64(proxy1-proxy0) / n / 1e3
	}
	if runtimePid != 0 {
		row["runtime_cpu_us_per_call"] = float64(runtime1-runtime0) / n / 1e3
	}
	emit(row)
	return nil
}

// batch makes `calls` Version calls split over the clients, each client one call at a time,
// and returns every call's latency.
func batch(ctx context.Context, clients []rt.RuntimeServiceClient, calls int) ([]time.Duration, error) {
	per := (calls + len(clients) - 1) / len(clients)
	out := make([][]time.Duration, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, client := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := make([]time.Duration, 0, per)
			for j := 0; j < per; j++ {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				_, err := client.Version(cctx, &rt.VersionRequest{})
				own = append(own, time.Since(t0))
				cancel()
				if err != nil {
					errs[i] = err
					return
				}
			}
			out[i] = own
		}()
	}
	wg.Wait()
	var all []time.Duration
	for i := range clients {
		if errs[i] != nil {
			return nil, errs[i]
		}
		all = append(all, out[i]...)
	}
	return all, nil
}

// latencyRow is n, percentiles (nearest rank), mean and max of samples in µs.
func latencyRow(samples []time.Duration) map[string]any {
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	pct := func(p float64) float64 {
		rank := int(math.Ceil(p * float64(len(samples))))
		rank = max(1, min(rank, len(samples)))
		return us(samples[rank-1])
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return map[string]any{
		"n":       len(samples),
		"p50_us":  pct(0.50),
		"p90_us":  pct(0.90),
		"p99_us":  pct(0.99),
		"mean_us": us(sum) / float64(max(1, len(samples))),
		"max_us":  pct(1),
	}
}
