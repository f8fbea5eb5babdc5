#!/usr/bin/env python3
"""Prints, for each named pod of a kubelet, every container's kernel cpuset next to numa-shim's
decision and the kubelet's view (integration/demo-kubelet.sh).

    demo_view.py CRICTL RUNTIME_SOCKET PODS_URL PLACEMENT_URL POD...
    demo_view.py --gone PODS_URL PLACEMENT_URL POD...

Waits (up to 120 s) until every pod runs with all its containers, or numa-shim lists it as
refused and the kubelet retried it; with --gone, until the pods left the kubelet and numa-shim. The kernel's view comes from cgroupfs (cpuset.cpus, cpuset.mems, cpu.cfs_quota_us of the
container's process) and /proc (Cpus_allowed_list), never from the runtime's report.
"""
import json
import subprocess
import sys
import time
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def short(pod):
    name, node = pod["metadata"]["name"], pod["spec"].get("nodeName", "")
    return name[: -len(node) - 1] if node and name.endswith("-" + node) else name


def statuses(pod):
    s = pod.get("status", {})
    return s.get("initContainerStatuses", []) + s.get("containerStatuses", [])


def running(pod):
    spec = len(pod["spec"].get("initContainers", [])) + len(pod["spec"]["containers"])
    st = statuses(pod)
    return len(st) == spec and all("running" in c["state"] for c in st)


def cgroup_paths(pid):
    paths = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(","):
                paths[c] = path
    return paths


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def kernel(crictl, socket, container_id):
    out = subprocess.run([crictl, "--runtime-endpoint", f"unix://{socket}", "inspect", container_id],
                         capture_output=True, text=True, check=True).stdout
    pid = json.loads(out)["info"]["pid"]
    paths = cgroup_paths(pid)
    if "cpuset" in paths:  # cgroup v1
        cs = f"/sys/fs/cgroup/cpuset{paths['cpuset']}"
        cpu = f"/sys/fs/cgroup/cpu,cpuacct{paths.get('cpu', '')}"
        quota = read(f"{cpu}/cpu.cfs_quota_us")
        if quota == "?":
            quota = read(f"/sys/fs/cgroup/cpu{paths.get('cpu', '')}/cpu.cfs_quota_us")
        cpus, mems = read(f"{cs}/cpuset.cpus"), read(f"{cs}/cpuset.mems")
    else:  # cgroup v2
        d = f"/sys/fs/cgroup{paths['']}"
        cpus, mems = read(f"{d}/cpuset.cpus.effective"), read(f"{d}/cpuset.mems.effective")
        quota = read(f"{d}/cpu.max").split()[0].replace("max", "-1")
    allowed = "?"
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            allowed = line.split()[1]
    return f"cpus {cpus:<5} mems {mems:<3} quota {quota:<7} allowed {allowed}"


def strip_node(items):
    node = next((p["spec"].get("nodeName", "") for p in items), "")
    return lambda n: n[: -len(node) - 1] if node and n.endswith("-" + node) else n


def wait_gone(pods_url, placement_url, names):
    deadline = time.time() + 120
    while time.time() < deadline:
        items = get(pods_url).get("items") or []
        held = [p["name"] for p in get(placement_url).get("pods") or []]
        strip = strip_node(items)
        left = {short(p) for p in items} | {strip(n) for n in held}
        if not left & set(names):
            return
        time.sleep(0.5)


def main():
    if sys.argv[1] == "--gone":
        wait_gone(*sys.argv[2:4], sys.argv[4:])
        return
    crictl, socket, pods_url, placement_url, *names = sys.argv[1:]
    deadline = time.time() + 120
    while True:
        items = get(pods_url).get("items") or []
        pods = {short(p): p for p in items}
        strip = strip_node(items)
        placement = get(placement_url)
        refused = {strip(r["name"]): r for r in placement.get("refused") or []}
        retried = lambda n: n in refused and refused[n]["count"] >= 2
        ready = all(retried(n) or (n in pods and running(pods[n])) for n in names)
        if ready or time.time() > deadline:
            break
        time.sleep(1)
    decided = {strip(p["name"]): p for p in placement.get("pods") or []}
    print(f"{'POD / CONTAINER':<28} {'NUMA-SHIM DECIDED':<34} {'KERNEL (cgroupfs, /proc)':<44} KUBELET")
    for name in names:
        pod, d = pods.get(name), decided.get(name)
        phase = pod["status"].get("phase", "?") if pod else "not seen"
        if name in refused:
            r = refused[name]
            print(f"{name:<28} refused {r['count']} times: {r['reason']}: {r['message']}")
            waiting = "; ".join(f"{c['name']} {next(iter(c['state']))}" for c in statuses(pod)) if pod else ""
            print(f"{'':<28} {'':<34} {'-':<44} {phase} {waiting}".rstrip())
            continue
        budget = f"budget cpus {d.get('cpus', '-')} mems {d.get('memoryNodes', '-')}" if d else "-"
        print(f"{name:<28} {budget + ' (' + d['source'] + ')' if d else '-':<34} {'':<44} {phase}")
        by_name = {c["name"]: c for c in (d or {}).get("containers", [])}
        for c in statuses(pod) if pod else []:
            mine = by_name.get(c["name"], {})
            decision = f"cpus {mine.get('cpus', '-'):<5} {mine.get('pool', '-'):<11} mems {mine.get('memoryNodes', '-')}"
            seen = kernel(crictl, socket, c["containerID"].split("://", 1)[-1]) if c.get("containerID") else "-"
            state = next(iter(c["state"]))
            print(f"  {c['name']:<26} {decision:<34} {seen:<44} {state}, {c.get('restartCount', 0)} restarts")


if __name__ == "__main__":
    main()
