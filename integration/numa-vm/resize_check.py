#!/usr/bin/env python3
"""The four views of one pod-level pod after an in-place resize, each checked against what the
step expects: numa-shim's `/placement`, numa-shim's PodResources `Get`, `kubectl get pod -o
json` and the kernel (cgroupfs of the pod and its containers). integration/numa-vm/resize-guest.sh
runs it in the multi-NUMA guest (cgroup v2); numa_check.py (cpusets, mems and allowed lists against
/placement) complements it.

    resize_check.py OPTIONS expect POD --cpus N --memory Q [--node N] [--app CPUS]
                    [--keeps CPUS] [--spec-cpus N] [--condition TEXT]
    resize_check.py OPTIONS wait POD (--cpus N --memory Q | --condition TEXT) [--timeout SECS]
    resize_check.py OPTIONS events POD

OPTIONS: --placement URL (numa-shim's metrics address), --podresources "CMD -socket SOCK"
(integration/podresources-go), --kubectl "CMD" (kubectl with its kubeconfig), --crictl "CMD"
(for container PIDs, as numa_check.py), --namespace NS (default `default`).

expect: the pod's CPU budget has N CPUs on one NUMA node (NODE when given), holds KEEPS, its
  container `app` has an exclusive slice of one CPU (APP when given) inside it and `sidecar`
  runs on the rest (the pod pool); the pod's memory bubble of Q bytes lies on that node
  (/placement's per-node `pod` memory, PodResources' pod-level `memory`), PodResources'
  pod-level `cpu_ids` are the budget, `app`'s `cpu_ids` its slice and its `memory` its own 64Mi
  on that node, `sidecar` has neither; kubectl shows Q and N in `status.resources` (and
  SPEC_CPUS, default N, in `spec.resources`) with no resize condition, or a
  `PodResizeInProgress` condition whose message holds TEXT (the status's CPU request may then
  be N as the kubelet reads it back from cgroup v2's cpu.weight, e.g. 3 as 2998m); the kernel
  has the pod cgroup's `cpu.max` at N CPUs and `memory.max` at Q, `sidecar`'s quota N CPUs and
  `memory.max` Q, `app` without quota and with its own memory limit. Each failure is printed as
  `FAIL [view] ...` (views: placement, podresources, kubectl, kernel); exit 1 on any. The last
  line is `facts: node N app CPUS budget CPUS pool CPUS`.
wait: until kubectl shows N CPUs and Q in `status.resources` and no resize condition (or a
  `PodResizeInProgress` condition holding TEXT); exit 1 at the timeout (default 900 s).
events: prints the pod's Events (reason, source, count, message).
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numa_check  # noqa: E402  (the same directory)

# The memory of container `app` (its own, not the pod's): resize-guest.sh's pod.
APP_MEMORY = 64 << 20
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10 ** 3, "M": 10 ** 6,
          "G": 10 ** 9, "T": 10 ** 12, "m": 0.001, "": 1}


def quantity(text):
    """A Kubernetes quantity ("3", "500m", "128Mi", "134217728") as a number."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text).strip())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"not a quantity: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def cgroup_v2_read_back(cpus):
    """The CPU request (in CPUs) the kubelet reads back from a cgroup v2 pod cgroup it wrote CPUS
    to: MilliCPUToShares, getCPUWeight, cpuWeightToCPUShares, SharesToMilliCPU (v1.37.2
    pkg/kubelet/cm/helpers_linux.go, cgroup_manager_linux.go, cgroup_v2_manager_linux.go)."""
    shares = int(cpus * 1000) * 1024 // 1000
    weight = 10000 if shares >= 262144 else 1 + (shares - 2) * 9999 // 262142
    back = (weight - 1) * 262142 // 9999 + 2
    return -(-back * 1000 // 1024) / 1000


def run(cmd, *args, timeout=300):
    out = subprocess.run(shlex.split(cmd) + list(args), capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd.split()[0]} {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def kubectl_pod(args):
    return json.loads(run(args.kubectl, "-n", args.namespace, "get", "pod", args.pod, "-o", "json"))


def resize_conditions(pod):
    return [c for c in pod.get("status", {}).get("conditions") or [] if c.get("type", "").startswith("PodResize")]


def resources_of(res):
    """(cpu, memory bytes) of requests and of limits, None where unset."""
    def pair(d):
        d = d or {}
        return (quantity(d["cpu"]) if "cpu" in d else None, quantity(d["memory"]) if "memory" in d else None)
    return pair((res or {}).get("requests")), pair((res or {}).get("limits"))


def wait(args):
    deadline = time.time() + args.timeout
    while True:
        try:
            pod = kubectl_pod(args)
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
            # The API server in the emulated guest drops a request now and then.
            print(f"(kubectl: {e}; trying again)", flush=True)
            if time.time() > deadline:
                print(f"FAIL [kubectl] {args.pod}: no answer after {args.timeout}s")
                return 1
            time.sleep(10)
            continue
        conds = resize_conditions(pod)
        status = resources_of(pod.get("status", {}).get("resources"))
        if args.condition:
            hit = [c for c in conds if c["type"] == "PodResizeInProgress" and args.condition in c.get("message", "")]
            if hit:
                print(f"{args.pod}: condition {hit[0]['type']} reason {hit[0].get('reason')}: {hit[0].get('message')}")
                return 0
        else:
            want = (float(args.cpus), quantity(args.memory))
            if status == (want, want) and not conds:
                print(f"{args.pod}: status.resources {json.dumps(pod['status']['resources'], sort_keys=True)}, "
                      f"no resize condition")
                return 0
        if time.time() > deadline:
            print(f"FAIL [kubectl] {args.pod}: after {args.timeout}s status.resources "
                  f"{json.dumps(pod.get('status', {}).get('resources'), sort_keys=True)}, resize conditions "
                  f"{json.dumps(conds, sort_keys=True)}")
            return 1
        time.sleep(10)


def pod_of(view, name):
    found = [p for p in view["pods"] if p["name"] == name]
    return found[0] if found else None


def cgroup_file(path, name):
    try:
        return numa_check.read(f"{path}/{name}")
    except OSError as e:
        return f"<{e.strerror}>"


def expect(args):
    fails = []

    def check(ok, view, what):
        if not ok:
            fails.append(f"FAIL [{view}] {what}")
        return ok

    cpus_want = int(args.cpus)
    mem_want = int(quantity(args.memory))
    fmt = numa_check.fmt
    parse = numa_check.parse_list

    # numa-shim's /placement.
    view = numa_check.placement(args.placement)
    nodes_of = numa_check.node_of_cpu(view)
    pod = pod_of(view, args.pod)
    if pod is None:
        print(f"FAIL [placement] no pod {args.pod} in /placement")
        return 1
    budget = parse(pod.get("cpus"))
    on = {nodes_of[c] for c in budget}
    node = min(on) if on else -1
    by_name = {c["name"]: c for c in pod["containers"]}
    app = by_name.get("app", {})
    sidecar = by_name.get("sidecar", {})
    app_cpus, side_cpus = parse(app.get("cpus")), parse(sidecar.get("cpus"))
    print(f"/placement: budget {fmt(budget)} (node(s) {fmt(on)}), memoryNodes {pod.get('memoryNodes')}; "
          f"app {app.get('pool')} {fmt(app_cpus)}; sidecar {sidecar.get('pool')} {fmt(side_cpus)}")
    check(len(budget) == cpus_want, "placement", f"the budget {fmt(budget)} has {len(budget)} CPUs, not {cpus_want}")
    check(len(on) == 1, "placement", f"the budget {fmt(budget)} spans nodes {fmt(on)}")
    if args.node is not None:
        check(on == {args.node}, "placement", f"the budget {fmt(budget)} is on node(s) {fmt(on)}, not {args.node}")
    check(parse(pod.get("memoryNodes")) == on, "placement",
          f"memoryNodes {pod.get('memoryNodes')}, the budget's node(s) {fmt(on)}")
    if args.keeps:
        check(parse(args.keeps) <= budget, "placement", f"the budget {fmt(budget)} lost CPUs of {args.keeps}")
    check(app.get("pool") == "exclusive" and len(app_cpus) == 1 and app_cpus <= budget, "placement",
          f"app: {app.get('pool')} on {fmt(app_cpus)}, not one exclusive CPU of the budget {fmt(budget)}")
    if args.app:
        check(app_cpus == parse(args.app), "placement", f"app on {fmt(app_cpus)}, not its CPU {args.app}")
    check(sidecar.get("pool") == "pod-shared" and side_cpus == budget - app_cpus, "placement",
          f"sidecar: {sidecar.get('pool')} on {fmt(side_cpus)}, not the pod pool {fmt(budget - app_cpus)}")
    held = {}
    for n in view["numaNodes"]:
        for m in n["memory"]:
            if m["resource"] == "memory":
                held[n["id"]] = m["pod"]
    print(f"/placement: memory held by pod budgets per node: "
          + " ".join(f"node{n}={b >> 20}MiB" for n, b in sorted(held.items())))
    check(held.get(node) == mem_want and all(b == 0 for n, b in held.items() if n != node), "placement",
          f"pod memory per node {held}, want {mem_want} bytes on node {node} only")

    # numa-shim's PodResources.
    try:
        got = json.loads(run(args.podresources, "get", args.pod, args.namespace))
    except (RuntimeError, ValueError) as e:
        got = {}
        check(False, "podresources", f"Get {args.pod}: {e}")
    pr = got.get("pod_resources", {})
    pr_cpus = {int(x) for x in pr.get("cpu_ids") or []}
    pr_mem = [m for m in pr.get("memory") or [] if m.get("memory_type") == "memory"]
    pr_mem_size = sum(int(m.get("size", 0)) for m in pr_mem)
    pr_mem_nodes = {int(n.get("ID", 0)) for m in pr_mem for n in (m.get("topology") or {}).get("nodes") or []}
    pr_containers = {c["name"]: c for c in pr.get("containers") or []}
    pr_app = {int(x) for x in pr_containers.get("app", {}).get("cpu_ids") or []}
    pr_side = {int(x) for x in pr_containers.get("sidecar", {}).get("cpu_ids") or []}
    app_mem = [m for m in pr_containers.get("app", {}).get("memory") or [] if m.get("memory_type") == "memory"]
    app_mem_size = sum(int(m.get("size", 0)) for m in app_mem)
    app_mem_nodes = {int(n.get("ID", 0)) for m in app_mem for n in (m.get("topology") or {}).get("nodes") or []}
    side_mem = pr_containers.get("sidecar", {}).get("memory") or []
    print(f"PodResources Get: pod cpu_ids {fmt(pr_cpus)}, pod memory {pr_mem_size >> 20}MiB on node(s) "
          f"{fmt(pr_mem_nodes)}; app cpu_ids {fmt(pr_app)}, memory {app_mem_size >> 20}MiB on node(s) "
          f"{fmt(app_mem_nodes)}; sidecar cpu_ids {fmt(pr_side)}, memory {len(side_mem)} block(s)")
    check(len(pr_cpus) == cpus_want and pr_cpus == budget, "podresources",
          f"pod cpu_ids {fmt(pr_cpus)}, want {cpus_want} CPUs = the budget {fmt(budget)}")
    check(pr_mem_size == mem_want and pr_mem_nodes == on, "podresources",
          f"pod memory {pr_mem_size} bytes on node(s) {fmt(pr_mem_nodes)}, want {mem_want} on {fmt(on)}")
    check(pr_app == app_cpus and len(pr_app) == 1, "podresources", f"app cpu_ids {fmt(pr_app)}, its slice {fmt(app_cpus)}")
    check(not pr_side, "podresources", f"sidecar cpu_ids {fmt(pr_side)}: a pod-pool container has none")
    check(app_mem_size == APP_MEMORY and app_mem_nodes == on, "podresources",
          f"app memory {app_mem_size} bytes on node(s) {fmt(app_mem_nodes)}, want its own {APP_MEMORY} on {fmt(on)}")
    check(not side_mem, "podresources", f"sidecar memory {side_mem}: a pod-pool container's is the pod's")

    # kubectl.
    kp = kubectl_pod(args)
    spec = resources_of(kp["spec"].get("resources"))
    status = resources_of(kp.get("status", {}).get("resources"))
    conds = resize_conditions(kp)
    print(f"kubectl: spec.resources {json.dumps(kp['spec'].get('resources'), sort_keys=True)}; "
          f"status.resources {json.dumps(kp.get('status', {}).get('resources'), sort_keys=True)}; "
          f"resize conditions {json.dumps([(c['type'], c.get('reason'), c.get('message')) for c in conds])}")
    spec_cpus = float(args.spec_cpus if args.spec_cpus is not None else args.cpus)
    want_status = (float(cpus_want), mem_want)
    # While a resize is in progress the kubelet reports the pod cgroup's CPU request as it reads
    # it back, through cgroup v2's cpu.weight (3 CPUs as 2998m), not the allocated one it
    # reports otherwise (v1.37.2 kubelet_pods.go:2252-2272).
    read_back = (cgroup_v2_read_back(cpus_want), mem_want)
    check(status == (want_status, want_status) or (args.condition and status == (read_back, want_status)),
          "kubectl", f"status.resources {status}, want cpu {cpus_want} and memory {mem_want} as requests and "
          f"limits" + (f" (or the request read back from cpu.weight, {read_back[0]})" if args.condition else ""))
    check(spec == ((spec_cpus, mem_want), (spec_cpus, mem_want)), "kubectl",
          f"spec.resources {spec}, want cpu {spec_cpus} and memory {mem_want}")
    if args.condition:
        check(any(c["type"] == "PodResizeInProgress" and args.condition in c.get("message", "") for c in conds),
              "kubectl", f"no PodResizeInProgress condition holding {args.condition!r}")
    else:
        check(not conds, "kubectl", f"resize conditions {conds}")
    phase = kp.get("status", {}).get("phase")
    check(phase == "Running", "kubectl", f"phase {phase}")

    # The kernel: the pod cgroup (parent of the containers') and the containers' cgroups.
    kernel = {}
    for name, c in (("app", app), ("sidecar", sidecar)):
        if not c.get("id"):
            check(False, "kernel", f"{name}: no container id in /placement")
            continue
        try:
            pid = numa_check.pid_of(args.crictl, c["id"])
            kernel[name] = numa_check.cgroup_dir(pid, "cpu")
        except (OSError, RuntimeError, subprocess.SubprocessError, ValueError) as e:
            check(False, "kernel", f"{name}: its cgroup: {e}")
    if kernel:
        pod_cg = os.path.dirname(next(iter(kernel.values())))
        period = 100000
        pod_cpu_max = cgroup_file(pod_cg, "cpu.max")
        pod_mem_max = cgroup_file(pod_cg, "memory.max")
        print(f"kernel: pod cgroup {pod_cg}: cpu.max {pod_cpu_max}, memory.max {pod_mem_max}")
        check(pod_cpu_max == f"{cpus_want * period} {period}", "kernel",
              f"pod cgroup cpu.max {pod_cpu_max}, want {cpus_want * period} {period}")
        check(pod_mem_max == str(mem_want), "kernel", f"pod cgroup memory.max {pod_mem_max}, want {mem_want}")
        for name, cg in kernel.items():
            cpu_max, mem_max = cgroup_file(cg, "cpu.max"), cgroup_file(cg, "memory.max")
            print(f"kernel: {name}: cpu.max {cpu_max}, memory.max {mem_max}")
            if name == "app":
                check(cpu_max.split()[0] == "max", "kernel", f"app (exclusive) cpu.max {cpu_max}, want no quota")
                own = [c for c in kp["spec"]["containers"] if c["name"] == "app"]
                limit = (own[0].get("resources") or {}).get("limits", {}).get("memory") if own else None
                check(limit is not None and mem_max == str(int(quantity(limit))), "kernel",
                      f"app memory.max {mem_max}, want its own limit {limit}")
            else:
                check(cpu_max == f"{cpus_want * period} {period}", "kernel",
                      f"sidecar cpu.max {cpu_max}, want the budget's {cpus_want * period} {period}")
                check(mem_max == str(mem_want), "kernel", f"sidecar memory.max {mem_max}, want the budget's {mem_want}")

    for f in fails:
        print(f)
    print(f"facts: node {node} app {fmt(app_cpus)} budget {fmt(budget)} pool {fmt(side_cpus)}")
    return 1 if fails else 0


def events(args):
    got = json.loads(run(args.kubectl, "-n", args.namespace, "get", "events", "-o", "json",
                         "--field-selector", f"involvedObject.name={args.pod}"))
    for e in sorted(got.get("items", []), key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        src = (e.get("source") or {}).get("component") or e.get("reportingComponent") or "-"
        print(f"{e.get('type', '-'):8} {e.get('reason', '-'):22} {src:10} x{e.get('count') or 1}  {e.get('message', '')}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--placement", default=os.environ.get("NUMA_CHECK_URL", "http://127.0.0.1:9464"))
    p.add_argument("--crictl", default=os.environ.get("NUMA_CHECK_CRICTL", "crictl"))
    p.add_argument("--podresources", required=True)
    p.add_argument("--kubectl", required=True)
    p.add_argument("--namespace", default="default")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expect")
    e.add_argument("pod")
    e.add_argument("--cpus", required=True)
    e.add_argument("--memory", required=True)
    e.add_argument("--node", type=int)
    e.add_argument("--app")
    e.add_argument("--keeps")
    e.add_argument("--spec-cpus")
    e.add_argument("--condition")
    e.set_defaults(run=expect)
    w = sub.add_parser("wait")
    w.add_argument("pod")
    w.add_argument("--cpus")
    w.add_argument("--memory")
    w.add_argument("--condition")
    w.add_argument("--timeout", type=int, default=900)
    w.set_defaults(run=wait)
    v = sub.add_parser("events")
    v.add_argument("pod")
    v.set_defaults(run=events)
    args = p.parse_args()
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
