// cri-load is the load generator of integration/bench-relay.sh: a CRI client built like the
// kubelet's (grpc-go, the generated k8s.io/cri-api client, the kubelet's dial options and a
// per-call deadline) that times the same calls against several targets in one interleaved
// session, rotating their order every round so that load drifting over the run hits all alike.
// It prints one JSON line per measurement and nothing else on stdout.
//
//	cri-load version -target direct=/run/x/containerd.sock@PID -target shim=/run/x/shim.sock@PID ...
//	cri-load pods -target direct=... -target shim-on=... -pods 100 -image IMG -cgroup-parent /x
//
// A target's @PID is the process whose CPU time is charged to it (the relay; for the runtime
// itself, the runtime): read from the kernel's per-process CPU clock (the scheduler's
// sum_exec_runtime over all its threads, dead ones included, in ns) before and after each batch.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's limits (k8s.io/cri-client): 16 MiB messages, runtimeRequestTimeout 2 min.
const (
	maxMsgSize  = 16 << 20
	callTimeout = 2 * time.Minute
)

// target is one socket to time, and the process charged for its CPU (0: none).
type target struct {
	name   string
	socket string
	pid    int
}

type targets []target

func (t *targets) String() string { return fmt.Sprint(*t) }

// Set parses NAME=SOCKET[@PID].
func (t *targets) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return fmt.Errorf("target %q: want NAME=SOCKET[@PID]", v)
	}
	socket, pidText, hasPid := strings.Cut(rest, "@")
	tg := target{name: name, socket: socket}
	if hasPid {
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			return fmt.Errorf("target %q: bad pid %q", v, pidText)
		}
		tg.pid = pid
	}
	*t = append(*t, tg)
	return nil
}

// dial connects like the kubelet's remote runtime service does.
func dial(socket string) (rt.RuntimeServiceClient, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", socket, err)
	}
	return rt.NewRuntimeServiceClient(conn), conn, nil
}

// cpuNanos is the CPU time pid has used so far, in ns (0 for pid 0). The clock id is the
// kernel's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED).
func cpuNanos(pid int) (int64, error) {
	if pid == 0 {
		return 0, nil
	}
	var ts unix.Timespec
	clock := int32(^uint32(pid)<<3 | 2)
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("cpu clock of pid %d: %w", pid, err)
	}
	return ts.Nano(), nil
}

// selfCPU is this process's own CPU time in ns.
func selfCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return ts.Nano()
}

// emit prints one JSON line.
func emit(row map[string]any) {
	line, err := json.Marshal(row)
	if err != nil {
		log.Fatalf("encode %v: %v", row, err)
	}
	fmt.Println(string(line))
}

// rotated is the order of the targets in round r.
func rotated[T any](items []T, r int) []T {
	n := len(items)
	out := make([]T, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, items[(i+r)%n])
	}
	return out
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("cri-load: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: cri-load version|pods -target NAME=SOCKET[@PID] ... (see -h)")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var ts targets
	fs.Var(&ts, "target", "NAME=SOCKET[@PID], repeated; the first is the reference")
	deadline := fs.Duration("deadline", 30*time.Minute, "give up after this long")
	runtimePid := fs.Int("runtime-pid", 0, "the runtime's pid, charged per batch too")
	var run func(context.Context) error
	switch os.Args[1] {
	case "version":
		o := versionOptions{}
		clients := fs.String("clients", "1,4,16", "closed-loop client counts, each its own connection")
		fs.IntVar(&o.rounds, "rounds", 40, "rounds; the target order rotates every round")
		fs.IntVar(&o.calls, "calls", 2000, "timed calls per target, client count and round")
		fs.IntVar(&o.warmup, "warmup", 50, "untimed calls per connection first")
		run = func(ctx context.Context) error {
			for _, c := range strings.Split(*clients, ",") {
				n, err := strconv.Atoi(c)
				if err != nil || n <= 0 {
					return fmt.Errorf("-clients %q: bad count %q", *clients, c)
				}
				o.clients = append(o.clients, n)
			}
			return runVersion(ctx, ts, *runtimePid, o)
		}
	case "pods":
		o := podOptions{}
		fs.IntVar(&o.pods, "pods", 100, "timed pods per target")
		fs.StringVar(&o.image, "image", "", "container image (present in the runtime)")
		fs.StringVar(&o.cgroupParent, "cgroup-parent", "", "cgroupfs parent of the pods, e.g. /numa-shim-bench")
		fs.StringVar(&o.logDir, "log-dir", "", "folder for pod log directories")
		run = func(ctx context.Context) error { return runPods(ctx, ts, o) }
	default:
		log.Fatalf("unknown test %q: version or pods", os.Args[1])
	}
	if err := fs.Parse(os.Args[2:]); err != nil {
		log.Fatal(err)
	}
	if len(ts) == 0 {
		log.Fatal("no -target")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}
