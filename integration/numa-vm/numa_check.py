#!/usr/bin/env python3
"""Checks what the kernel applied against what numa-shim decided, on any node (the multi-NUMA
guest of integration/numa-vm, or a real one). Reads numa-shim's decision from its `/placement`
endpoint and the kernel's from cgroupfs (v1 or v2) and /proc, never from the runtime's report.

    numa_check.py [--placement URL] [--crictl CMD] check [--break-mems NAME]
    numa_check.py [--placement URL] [--crictl CMD] numastat NAME MIB [--wait SECS]
    numa_check.py [--placement URL] snapshot
    numa_check.py [--placement URL] same SNAPSHOT_FILE

check: for every container numa-shim placed, `cpuset.cpus`, `cpuset.mems`, `Cpus_allowed_list`
  and `Mems_allowed_list` equal the decision, exclusive and pod-pool CPUs lie on the decided
  NUMA nodes, no CPU is held twice (exclusive slices, pod budgets, the node shared pool), and a
  node-shared container runs on exactly the node shared pool. --break-mems NAME first writes a
  wrong `cpuset.mems` into container NAME's cgroup (to show the check fails). Exit 1 on a
  difference, each named on a FAIL line.
numastat: waits until container NAME's cgroup holds MIB MiB in `memory.numa_stat` (anon +
  file), then checks that >= 95 % of it lies on the container's decided memory nodes.
snapshot / same: prints the decision (pods, containers, pools) as JSON; `same` compares the live
  decision with one printed before (a numa-shim restart must keep every decision).

--placement is numa-shim's metrics address (default http://127.0.0.1:9464, env NUMA_CHECK_URL);
--crictl the crictl command line that reaches numa-shim or the runtime (default `crictl`, env
NUMA_CHECK_CRICTL), used for each container's PID.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request

CGROUP = "/sys/fs/cgroup"


def parse_list(text):
    """A Linux list ("0-2,5") as a set of ints; empty or None is the empty set."""
    out = set()
    for part in (text or "").strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def fmt(cpus):
    return ",".join(str(c) for c in sorted(cpus)) or "-"


def placement(url):
    with urllib.request.urlopen(url.rstrip("/") + "/placement", timeout=30) as r:
        return json.load(r)


def node_of_cpu(view):
    return {c["id"]: n["id"] for n in view["numaNodes"] for c in n["cpus"]}


def all_nodes(view):
    return {n["id"] for n in view["numaNodes"]}


_PIDS = {}


def pid_of(crictl, cid):
    """The container's first process: the lowest PID whose cgroup's last path part names the
    container id (cgroupfs `<parent>/<id>`, systemd `cri-containerd-<id>.scope`,
    `crio-<id>.scope`), else what `crictl inspect` says."""
    if not _PIDS:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cgroup") as f:
                    for line in f:
                        leaf = line.rstrip("\n").rsplit("/", 1)[-1]
                        _PIDS.setdefault(leaf, set()).add(int(entry))
            except OSError:
                continue
    found = [min(pids) for leaf, pids in _PIDS.items() if cid in leaf]
    if found:
        return min(found)
    out = subprocess.run(
        shlex.split(crictl) + ["inspect", "-o", "go-template", "--template", "{{.info.pid}}", cid],
        capture_output=True, text=True, check=True, timeout=120,
    )
    return int(out.stdout.strip())


def cgroup_dir(pid, controller):
    """The folder of PID's cgroup holding CONTROLLER (v2: the unified hierarchy)."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    for _, ctrls, path in lines:
        if controller in ctrls.split(","):
            return f"{CGROUP}/{controller}{path}"
    for hid, ctrls, path in lines:
        if hid == "0" and ctrls == "":
            return f"{CGROUP}{path}" if os.path.exists(f"{CGROUP}/cgroup.controllers") else f"{CGROUP}/unified{path}"
    raise RuntimeError(f"/proc/{pid}/cgroup has no {controller} entry")


def read(path):
    with open(path) as f:
        return f.read().strip()


def status_field(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def containers(view):
    for pod in view["pods"]:
        for c in pod["containers"]:
            if c.get("id"):
                yield pod, c


def wanted_mems(view, pod, c):
    """The decided memory nodes of a container: its own, else its pod's, else every node."""
    text = c.get("memoryNodes") or pod.get("memoryNodes")
    return parse_list(text) if text else all_nodes(view)


class Checker:
    def __init__(self):
        self.failures = 0

    def fail(self, what):
        self.failures += 1
        print(f"FAIL: {what}")

    def expect(self, ok, what):
        if not ok:
            self.fail(what)
        return ok


def check(args):
    view = placement(args.placement)
    nodes_of = node_of_cpu(view)
    ck = Checker()
    if args.break_mems:
        break_mems(args, view, args.break_mems)
    print(f"{'pod/container':34} {'pool':11} | {'decided cpus':12} {'mems':5} | "
          f"{'cpuset.cpus':11} {'cpuset.mems':11} {'Cpus_allowed':12} {'Mems_allowed':12} | nodes of cpus")
    for pod, c in containers(view):
        name = f"{pod['name']}/{c['name']}"
        cpus, mems = parse_list(c["cpus"]), wanted_mems(view, pod, c)
        pid = pid_of(args.crictl, c["id"])
        cs = cgroup_dir(pid, "cpuset")
        k_cpus = parse_list(read(f"{cs}/cpuset.cpus"))
        raw_mems = read(f"{cs}/cpuset.mems")
        # An empty cpuset.mems (v2) means the parent's: the kernel's effective set says which.
        effective = f"{cs}/cpuset.mems.effective"
        if not os.path.exists(effective):
            effective = f"{cs}/cpuset.effective_mems"  # cgroup v1
        k_mems = parse_list(raw_mems if raw_mems else read(effective))
        a_cpus = parse_list(status_field(pid, "Cpus_allowed_list"))
        a_mems = parse_list(status_field(pid, "Mems_allowed_list"))
        on = {nodes_of[x] for x in k_cpus}
        print(f"{name:34} {c['pool']:11} | {fmt(cpus):12} {fmt(mems):5} | {fmt(k_cpus):11} "
              f"{fmt(k_mems):11} {fmt(a_cpus):12} {fmt(a_mems):12} | {fmt(on)}")
        where = f"{name} ({cs})"
        ck.expect(k_cpus == cpus, f"{where}: cpuset.cpus is {fmt(k_cpus)}, numa-shim decided {fmt(cpus)}")
        ck.expect(k_mems == mems, f"{where}: cpuset.mems is {fmt(k_mems)}, numa-shim decided {fmt(mems)}")
        ck.expect(a_cpus == cpus, f"{where}: Cpus_allowed_list of pid {pid} is {fmt(a_cpus)}, decided {fmt(cpus)}")
        ck.expect(a_mems == mems, f"{where}: Mems_allowed_list of pid {pid} is {fmt(a_mems)}, decided {fmt(mems)}")
        if c["pool"] in ("exclusive", "pod-shared"):
            ck.expect(on <= mems, f"{where}: its CPUs {fmt(k_cpus)} lie on nodes {fmt(on)}, "
                      f"not only on its decided nodes {fmt(mems)}")
        if c["pool"] == "node-shared":
            shared = parse_list(view["sharedCPUs"])
            ck.expect(cpus == shared, f"{where}: node-shared container on {fmt(cpus)}, "
                      f"the node shared pool is {fmt(shared)}")
    check_disjoint(view, ck)
    print(f"numa_check: {sum(1 for _ in containers(view))} containers, {ck.failures} failures")
    return 1 if ck.failures else 0


def check_disjoint(view, ck):
    """No CPU held twice: exclusive slices, pod budgets and the node shared pool."""
    holders = {}

    def hold(cpus, who):
        for x in cpus:
            holders.setdefault(x, []).append(who)

    for pod in view["pods"]:
        budget = parse_list(pod.get("cpus"))
        hold(budget, f"pod budget {pod['name']}")
        pod_pool = set(budget)
        for c in pod["containers"]:
            if c["pool"] == "exclusive":
                slice_ = parse_list(c["cpus"])
                pod_pool -= slice_
                if not budget:
                    hold(slice_, f"exclusive {pod['name']}/{c['name']}")
                else:
                    ck.expect(slice_ <= budget, f"{pod['name']}/{c['name']}: exclusive {fmt(slice_)} "
                              f"outside its pod budget {fmt(budget)}")
        for c in pod["containers"]:
            if c["pool"] == "pod-shared":
                ck.expect(parse_list(c["cpus"]) == pod_pool, f"{pod['name']}/{c['name']}: pod-shared "
                          f"on {fmt(parse_list(c['cpus']))}, its pod's shared pool is {fmt(pod_pool)}")
        slices = [parse_list(c["cpus"]) for c in pod["containers"] if c["pool"] == "exclusive"]
        for i, a in enumerate(slices):
            for b in slices[i + 1:]:
                ck.expect(not a & b, f"{pod['name']}: two exclusive slices share CPUs {fmt(a & b)}")
    hold(parse_list(view["sharedCPUs"]) - parse_list(view["reservedCPUs"]), "node shared pool")
    for x, who in sorted(holders.items()):
        ck.expect(len(who) == 1, f"CPU {x} granted twice: {', '.join(who)}")


def break_mems(args, view, name):
    """Writes a cpuset.mems other than the decided one into container NAME's cgroup."""
    for pod, c in containers(view):
        if c["name"] == name:
            wrong = sorted(all_nodes(view) - wanted_mems(view, pod, c))
            if not wrong:
                sys.exit(f"numa_check: --break-mems {name}: it may use every node, none is wrong")
            cs = cgroup_dir(pid_of(args.crictl, c["id"]), "cpuset")
            with open(f"{cs}/cpuset.mems", "w") as f:
                f.write(str(wrong[0]))
            print(f"numa_check: wrote a wrong cpuset.mems {wrong[0]} into {cs} ({pod['name']}/{name})")
            return
    sys.exit(f"numa_check: --break-mems {name}: no such container in /placement")


def numa_stat(path):
    """Bytes per node of anon + file memory in a memory.numa_stat: v2 lines are
    `anon N0=<bytes> ...`, v1 lines `anon=<pages> N0=<pages> ...` (hierarchical_ ones skipped)."""
    per = {}
    for line in read(path).splitlines():
        kind, *cols = line.split()
        kind, v1, _ = kind.partition("=")
        if kind not in ("anon", "file"):
            continue
        unit = os.sysconf("SC_PAGE_SIZE") if v1 else 1
        for col in cols:
            node, _, value = col.partition("=")
            per[int(node[1:])] = per.get(int(node[1:]), 0) + int(value) * unit
    return per


def numastat(args):
    view = placement(args.placement)
    found = [(p, c) for p, c in containers(view) if c["name"] == args.name]
    if not found:
        sys.exit(f"numa_check: numastat: no container {args.name} in /placement")
    pod, c = found[0]
    mems = wanted_mems(view, pod, c)
    path = f"{cgroup_dir(pid_of(args.crictl, c['id']), 'memory')}/memory.numa_stat"
    want = args.mib << 20
    deadline = time.time() + args.wait
    while True:
        per = numa_stat(path)
        total = sum(per.values())
        if total >= want or time.time() > deadline:
            break
        time.sleep(1)
    on = sum(v for n, v in per.items() if n in mems)
    shown = " ".join(f"N{n}={v >> 20}MiB" for n, v in sorted(per.items()))
    print(f"{pod['name']}/{args.name}: memory.numa_stat anon+file {shown}; decided nodes {fmt(mems)}: "
          f"{on >> 20} of {total >> 20} MiB ({100 * on / max(total, 1):.1f} %)")
    if total < want:
        print(f"FAIL: {pod['name']}/{args.name}: only {total >> 20} MiB charged after {args.wait}s, "
              f"wanted {args.mib} MiB ({path})")
        return 1
    if on * 100 < total * 95:
        print(f"FAIL: {pod['name']}/{args.name}: {on >> 20} of {total >> 20} MiB on its decided nodes "
              f"{fmt(mems)}, less than 95 % ({path})")
        return 1
    return 0


def decision(view):
    return {
        "sharedCPUs": view["sharedCPUs"],
        "pods": sorted(
            [{"uid": p["uid"], "name": p["name"], "cpus": p.get("cpus"), "memoryNodes": p.get("memoryNodes"),
              "containers": sorted([{k: c.get(k) for k in ("name", "id", "cpus", "pool", "memoryNodes")}
                                    for c in p["containers"]], key=lambda c: c["name"])}
             for p in view["pods"]], key=lambda p: p["uid"]),
    }


def snapshot(args):
    print(json.dumps(decision(placement(args.placement)), indent=1, sort_keys=True))
    return 0


def same(args):
    with open(args.file) as f:
        before = json.load(f)
    now = decision(placement(args.placement))
    if now == before:
        print(f"numa_check: the decision of {len(now['pods'])} pods is the one from before")
        return 0
    print("FAIL: numa-shim's decision changed:")
    print("  before: " + json.dumps(before, sort_keys=True))
    print("  now:    " + json.dumps(now, sort_keys=True))
    return 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--placement", default=os.environ.get("NUMA_CHECK_URL", "http://127.0.0.1:9464"))
    p.add_argument("--crictl", default=os.environ.get("NUMA_CHECK_CRICTL", "crictl"))
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--break-mems", metavar="NAME")
    c.set_defaults(run=check)
    n = sub.add_parser("numastat")
    n.add_argument("name")
    n.add_argument("mib", type=int)
    n.add_argument("--wait", type=int, default=120)
    n.set_defaults(run=numastat)
    sub.add_parser("snapshot").set_defaults(run=snapshot)
    s = sub.add_parser("same")
    s.add_argument("file")
    s.set_defaults(run=same)
    args = p.parse_args()
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
