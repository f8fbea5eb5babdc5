#!/usr/bin/env python3
"""The cases of integration/numa-vm/kubelet-compare.sh and their judge: the same static pods
through kubelet v1.37.2 with its own CPU, Memory and Topology Managers ("kubelet") and through
numa-shim with the kubelet's managers off ("numa-shim"), on the same multi-NUMA guest.

    kubelet_compare.py cases
    kubelet_compare.py prepare CASE DIR --image IMAGE
    kubelet_compare.py settle POD --pods URL [--placement URL] [--timeout SECS]
    kubelet_compare.py gone POD --pods URL [--timeout SECS]
    kubelet_compare.py collect --mode kubelet|numa-shim --pods URL --crictl CMD
                               --podresources "CMD -socket SOCK" [--placement URL]
                               [--only POD] [--merge FILE] [--out FILE]
    kubelet_compare.py compare CASE KUBELET.json NUMA-SHIM.json [--tamper PATH=VALUE]
    kubelet_compare.py summary RUN.json | probe RUN.json

cases: the case names, one a line (NUMAVM_KUBELET_CASES, a space-separated list, picks some).
prepare: writes the case's kubelet.yaml (the resource-manager settings both runs share, sized to
  this machine: reservedSystemCPUs 0, 100Mi reserved on node 0), plugin.json (the sample device
  plugin's devices with their NUMA nodes, when the case has devices), steps (one pod a line, in
  the order they are added; "-NAME" takes pod NAME away again) and pod-NAME.yaml, scaled to
  the guest's CPUs per NUMA node.
settle: waits until POD either runs every container (its restartable init containers too), or is
  refused: Failed (the kubelet refusing it itself) or listed as refused in numa-shim's /placement.
gone: waits until the kubelet no longer lists POD (a remove step).
collect: per pod its admission (running, or refused with reason and message: the kubelet's pod
  status, or numa-shim's refusal), per running container the kernel's cpuset.cpus, cpuset.mems,
  cpu.max (cgroupfs of the container's first process) and Cpus_allowed_list / Mems_allowed_list
  (/proc), and the PodResources List and Get answers (CPU ids, memory blocks with NUMA nodes,
  devices with ids and NUMA nodes), normalised: sorted, proto3's left-out zeros filled in, a
  refusal's message without the kubelet's "Pod was rejected: ". --only POD reads one pod (before
  a remove step); --merge FILE carries the readings of pods removed before into this one.
compare: prints every item of the two runs side by side, `equal` or `DIFFERENT`; exit 1 when
  any differs (a bug in numa-shim), unless the case has a divergence docs/fidelity.md documents
  (DOCUMENTED) and every differing item is one that divergence names. --tamper changes
  one value of the kubelet's side first (e.g. `pods.guaranteed.containers.app.mems=1`), to see
  the comparison fail.
"""
import argparse
import fnmatch
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numa_check  # noqa: E402  (the kernel readers: pid_of, cgroup_dir, read, status_field)

NODE = os.uname().nodename.lower()  # the static pods' name suffix


def topology():
    """(NUMA nodes, CPUs per node) of this machine."""
    base = "/sys/devices/system/node"
    nodes = sorted(int(n[4:]) for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit())
    per = len(numa_check.parse_list(numa_check.read(f"{base}/node{nodes[0]}/cpulist")))
    return len(nodes), per


# --- the cases -------------------------------------------------------------------------------

def res(cpu, mem, gpu=0):
    r = {"cpu": str(cpu), "memory": mem}
    if gpu:
        r["example.com/gpu"] = str(gpu)
    return {"requests": dict(r), "limits": dict(r)}


def ctr(name, resources=None, sidecar=False):
    c = {"name": name, "image": "IMAGE", "imagePullPolicy": "Never",
         "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 36000 & wait"]}
    if resources:
        c["resources"] = resources
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(name, containers, sidecars=(), pod_resources=None):
    spec = {"hostNetwork": True, "terminationGracePeriodSeconds": 2, "containers": list(containers)}
    if sidecars:
        spec["initContainers"] = list(sidecars)
    if pod_resources:
        spec["resources"] = pod_resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def burst():
    """A Burstable pod in the node shared pool that asks no CPU (the node's allocatable CPUs,
    all but the reserved one, stay for the others: the kubelet's own admission would refuse a
    pod over them before any manager sees it)."""
    return pod("burst", [ctr("app", {"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi"}})])


def remove(name):
    """A step that takes a pod away again (its manifest removed, the pod gone before the next
    step): its readings are taken just before, and its resources come back to the node."""
    return ("remove", name)


def cases(nodes, per):
    """name -> (policy, scope, plugin devices or None, steps in order: pods, and remove(NAME)).
    `nodes` NUMA nodes of `per` CPUs each; CPU 0 is reserved, so node 0 holds per-1 CPUs for
    pods and the others per; the machine's allocatable CPUs are nodes * per - 1.

    A pod that must be refused asks for no more than the node's allocatable CPUs and memory
    still free (the kubelet's own fit check, which runs with its managers off too, lets it
    through, so the refusal compared is the Topology Manager's against numa-shim's), and is
    removed again right after: behind numa-shim a refused pod stays Pending, and the kubelet
    keeps counting its requests against allocatable until it is gone, where with its own
    managers on the refused pod is Failed and counts no more."""
    wide = per + 1  # more than any node holds; within allocatable while no other pod holds CPUs
    return {
        # The tutorial's pods scaled to the guest, pod scope: a node-shared pod; a pod of per+1
        # CPUs and a pod-level pod of per+1 CPUs for two workers, each more than a node and
        # less than the machine: refused under single-numa-node by the Topology Manager (its two
        # messages); then a 1-CPU pod, pod-scope-mixed (a node's CPUs: main-app's exclusive
        # slice and two sidecars in the pod pool); pod-scope-mixed goes again and
        # pod-level-resource-demo (a node's CPUs shared by two workers) takes its place.
        "pod-single-numa-node": ("single-numa-node", "pod", None, [
            burst(),
            pod("too-big", [ctr("app", res(wide, "128Mi"))]),
            remove("too-big"),
            pod("too-big-pod-level", [ctr("worker-1"), ctr("worker-2")], pod_resources=res(wide, "128Mi")),
            remove("too-big-pod-level"),
            pod("guaranteed", [ctr("app", res(1, "128Mi"))]),
            pod("pod-scope-mixed", [ctr("main-app", res(1, "128Mi"))],
                sidecars=[ctr("metrics-sidecar", sidecar=True), ctr("logging-sidecar", sidecar=True)],
                pod_resources=res(per, "256Mi")),
            remove("pod-scope-mixed"),
            pod("pod-level-resource-demo", [ctr("worker-1"), ctr("worker-2")],
                pod_resources=res(per, "256Mi")),
        ]),
        # restricted: one CPU more than a node refused (within allocatable), a node's CPUs admitted.
        "pod-restricted": ("restricted", "pod", None, [
            pod("too-big", [ctr("app", res(wide, "128Mi"))]),
            remove("too-big"),
            pod("two-cpus", [ctr("app", res(per, "128Mi"))]),
        ]),
        # best-effort: a pod one CPU bigger than a node spans two nodes.
        "pod-best-effort": ("best-effort", "pod", None, [
            burst(),
            pod("spans-two", [ctr("app", res(wide, "256Mi"))]),
        ]),
        # container scope: each container of one pod on its own node (a third container of a
        # node's CPUs on a third node when the guest has one).
        "container-single-numa-node": ("single-numa-node", "container", None, [
            burst(),
            pod("two-nodes", [ctr("small", res(1, "64Mi")), ctr("big", res(per, "128Mi"))]) if nodes < 3 else
            pod("three-nodes", [ctr("small", res(1, "64Mi")), ctr("big", res(per, "128Mi")),
                                ctr("big-2", res(per, "64Mi"))]),
        ]),
        # The sample device plugin's example.com/gpu devices on node 1: the pods' CPUs and
        # memory follow them there.
        "devices-node1": ("single-numa-node", "pod", [("gpu0", 1), ("gpu1", 1)], [
            pod("gpu-a", [ctr("app", res(1, "128Mi", gpu=1))]),
            pod("gpu-b", [ctr("app", res(1, "64Mi", gpu=1))]),
        ]),
        # One device on node 0 (which holds per-1 free CPUs) and one on node 1, a pod of a node's
        # CPUs and one device: the split decision (docs/devices.md). The kubelet with every
        # manager on takes gpu1 and node 1; with its managers off its device manager would
        # choose gpu0 first, where numa-shim cannot fit the CPUs: behind numa-shim the plugin
        # registers with numa-shim's device plugin front, which answers gpu1.
        "devices-split": ("single-numa-node", "pod", [("gpu0", 0), ("gpu1", 1)], [
            pod("gpu-wide", [ctr("app", res(per, "128Mi", gpu=1))]),
        ]),
    }


# Divergences docs/fidelity.md documents: case -> (reason, the items the divergence makes
# differ, as fnmatch patterns of compare's item names). A case whose differing items all match
# its patterns is reported as documented; any other differing item fails it. None now:
# devices-split's (the split decision) is closed by numa-shim's device plugin front, which
# kubelet-compare.sh turns on for every case with a device plugin.
DOCUMENTED: dict = {}


def cmd_cases(_args):
    known = cases(*topology())
    for name in os.environ.get("NUMAVM_KUBELET_CASES", "").split() or known:
        if name not in known:
            sys.exit(f"NUMAVM_KUBELET_CASES: no case {name} (cases: {' '.join(known)})")
        print(name)


def cmd_prepare(args):
    policy, scope, devices, pods = cases(*topology())[args.case]
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "kubelet.yaml"), "w") as f:
        f.write("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
                "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n"
                f"topologyManagerPolicy: {policy}\ntopologyManagerScope: {scope}\n"
                "featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}\n")
    if devices:
        with open(os.path.join(args.dir, "plugin.json"), "w") as f:
            json.dump({"resource": "example.com/gpu",
                       "devices": [{"id": i, "numa": n} for i, n in devices]}, f)
    with open(os.path.join(args.dir, "steps"), "w") as steps:
        for p in pods:
            if isinstance(p, tuple):
                steps.write(f"-{p[1]}\n")
                continue
            name = p["metadata"]["name"]
            text = json.dumps(p, indent=1).replace('"IMAGE"', json.dumps(args.image))
            with open(os.path.join(args.dir, f"pod-{name}.yaml"), "w") as f:
                f.write(text + "\n")
            steps.write(name + "\n")


# --- reading the runs ------------------------------------------------------------------------

def get_json(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def kubelet_pod(pods_url, name):
    for p in get_json(pods_url).get("items") or []:
        if p["metadata"]["name"] in (name, f"{name}-{NODE}"):
            return p
    return None


def shim_refusal(placement_url, name):
    if not placement_url:
        return None
    for r in get_json(placement_url.rstrip("/") + "/placement").get("refused") or []:
        if r.get("name") in (name, f"{name}-{NODE}"):
            return r
    return None


def all_running(p):
    spec = p["spec"]
    want = [c["name"] for c in spec.get("containers", [])]
    want += [c["name"] for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    st = p.get("status", {})
    running = {s["name"] for s in st.get("containerStatuses", []) + st.get("initContainerStatuses", [])
               if "running" in (s.get("state") or {})}
    return all(n in running for n in want)


def cmd_settle(args):
    deadline = time.monotonic() + args.timeout
    state = "not seen"
    while time.monotonic() < deadline:
        try:
            p = kubelet_pod(args.pods, args.pod)
            if p is not None:
                phase = p.get("status", {}).get("phase")
                if all_running(p):
                    print(f"{args.pod}: running")
                    return 0
                if phase == "Failed":
                    print(f"{args.pod}: refused by the kubelet: {p['status'].get('reason')}: {p['status'].get('message')}")
                    return 0
                state = f"phase {phase}"
            r = shim_refusal(args.placement, args.pod)
            if r is not None:
                print(f"{args.pod}: refused by numa-shim: {r.get('reason')}: {r.get('message')}")
                return 0
        except (OSError, ValueError) as e:
            state = f"not answering: {e}"
        time.sleep(1)
    print(f"{args.pod}: neither running nor refused after {args.timeout}s ({state})")
    return 1


def cmd_gone(args):
    """Waits until the kubelet no longer lists POD (its manifest removed)."""
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            if kubelet_pod(args.pods, args.pod) is None:
                print(f"{args.pod}: gone")
                return 0
        except (OSError, ValueError):
            pass
        time.sleep(1)
    print(f"{args.pod}: still listed after {args.timeout}s")
    return 1


def node_ids(topo):
    """NUMA node ids of a PodResources topology: NUMANode's field is `ID` (proto names), and
    proto3 JSON leaves out id 0."""
    return sorted({int(n.get("ID", n.get("id", 0))) for n in (topo or {}).get("nodes") or []})


def norm_container(c):
    return {
        "cpu_ids": sorted(int(x) for x in c.get("cpu_ids") or []),
        "memory": sorted(({"type": m.get("memory_type", ""), "size": int(m.get("size", 0)),
                           "nodes": node_ids(m.get("topology"))} for m in c.get("memory") or []),
                         key=json.dumps),
        "devices": sorted(({"resource": d.get("resource_name", ""), "ids": sorted(d.get("device_ids") or []),
                            "nodes": node_ids(d.get("topology"))} for d in c.get("devices") or []),
                          key=json.dumps),
    }


def norm_pod(p):
    out = {"containers": {c["name"]: norm_container(c) for c in p.get("containers") or []}}
    rest = norm_container(p)
    for k, v in rest.items():
        if v:
            out[k] = v
    return out


def short(name):
    return name[: -len(NODE) - 1] if name.endswith("-" + NODE) else name


def podresources(cmd, *call):
    out = subprocess.run(shlex.split(cmd) + list(call), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        # The message only: for an unknown pod the kubelet answers code Unknown (a plain Go
        # error), numa-shim NotFound with the same words (docs/podresources.md).
        text = (out.stdout + out.stderr).strip()
        try:
            return {"error": json.loads(text)["message"]}
        except (ValueError, KeyError, TypeError):
            return {"error": text}
    return json.loads(out.stdout or "{}")


REJECTED = "Pod was rejected: "


def admission_of(message):
    """A refusal's message without the "Pod was rejected: " the kubelet's rejectPod puts before
    its admit handler's message in the pod status (numa-shim's refusal is the handler's message
    alone: the CRI error it returns; its API-server report adds the same prefix)."""
    return message[len(REJECTED):] if message and message.startswith(REJECTED) else message


def cmd_collect(args):
    got = {"mode": args.mode, "pods": {}, "list": {}, "get": {}}
    items = [p for p in get_json(args.pods).get("items") or []
             if not args.only or short(p["metadata"]["name"]) == args.only]
    if args.only and not items:
        sys.exit(f"collect --only {args.only}: the kubelet does not list that pod")
    for p in sorted(items, key=lambda p: p["metadata"]["name"]):
        name = short(p["metadata"]["name"])
        st = p.get("status", {})
        entry = {}
        refusal = shim_refusal(args.placement, p["metadata"]["name"]) if args.mode == "numa-shim" else None
        if st.get("phase") == "Failed":
            entry["admission"] = {"refused": st.get("reason"), "message": admission_of(st.get("message"))}
        elif refusal is not None:
            entry["admission"] = {"refused": refusal.get("reason"), "message": admission_of(refusal.get("message"))}
        elif all_running(p):
            entry["admission"] = "running"
        else:
            entry["admission"] = f"neither running nor refused (phase {st.get('phase')})"
        if entry["admission"] == "running":
            entry["containers"] = {}
            uid = p["metadata"]["uid"]
            ps = subprocess.run(shlex.split(args.crictl) + ["ps", "-o", "json", "--label", f"io.kubernetes.pod.uid={uid}"],
                                capture_output=True, text=True, check=True, timeout=120)
            for c in json.loads(ps.stdout).get("containers") or []:
                if c.get("state") != "CONTAINER_RUNNING":
                    continue
                cname = c["metadata"]["name"]
                pid = numa_check.pid_of(args.crictl, c["id"])
                cg = numa_check.cgroup_dir(pid, "cpuset")
                cpu_cg = numa_check.cgroup_dir(pid, "cpu")
                quota = (numa_check.read(f"{cpu_cg}/cpu.max").split()[0]
                         if os.path.exists(f"{cpu_cg}/cpu.max") else numa_check.read(f"{cpu_cg}/cpu.cfs_quota_us"))
                entry["containers"][cname] = {
                    "cpus": numa_check.read(f"{cg}/cpuset.cpus"),
                    "mems": numa_check.read(f"{cg}/cpuset.mems"),
                    "Cpus_allowed_list": numa_check.status_field(pid, "Cpus_allowed_list"),
                    "Mems_allowed_list": numa_check.status_field(pid, "Mems_allowed_list"),
                    "cpu_quota": quota,
                }
        got["pods"][name] = entry
    lst = podresources(args.podresources, "list")
    if "error" in lst:
        got["list"] = lst
    else:
        for p in lst.get("pod_resources") or []:
            if p.get("namespace") == "default" and (not args.only or short(p["name"]) == args.only):
                got["list"][short(p["name"])] = norm_pod(p)
    for p in items:
        full = p["metadata"]["name"]
        g = podresources(args.podresources, "get", full, "default")
        got["get"][short(full)] = g if "error" in g else norm_pod(g.get("pod_resources") or {})
    if args.merge and os.path.exists(args.merge):
        # The readings of pods taken away before (remove steps), as they were just before.
        with open(args.merge) as f:
            before = json.load(f)
        for key in ("pods", "list", "get"):
            if "error" in got[key] or "error" in before[key]:
                continue
            for name, v in before[key].items():
                got[key].setdefault(name, v)
    text = json.dumps(got, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


# --- the judge -------------------------------------------------------------------------------

def flatten(v, prefix=""):
    if isinstance(v, dict) and v:
        out = {}
        for k, x in v.items():
            out.update(flatten(x, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: v}


def tamper(tree, spec):
    path, _, value = spec.partition("=")
    keys = path.split(".")
    node = tree
    for k in keys[:-1]:
        node = node[k]
    if keys[-1] not in node:
        sys.exit(f"--tamper {spec}: no {path} in the kubelet's run")
    node[keys[-1]] = value


def cmd_compare(args):
    with open(args.kubelet) as f:
        kub = json.load(f)
    with open(args.shim) as f:
        shim = json.load(f)
    for spec in args.tamper or []:
        tamper(kub, spec)
        print(f"tampered: the kubelet's {spec}")
    a, b = flatten({k: kub[k] for k in ("pods", "list", "get")}), flatten({k: shim[k] for k in ("pods", "list", "get")})
    differing = []
    width = max((len(k) for k in a.keys() | b.keys()), default=10)
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key, "(absent)"), b.get(key, "(absent)")
        same = x == y
        if not same:
            differing.append(key)
        print(f"  {'equal    ' if same else 'DIFFERENT'} {key:<{width}}  kubelet={json.dumps(x)}"
              + ("" if same else f"  numa-shim={json.dumps(y)}"))
    diffs = len(differing)
    if diffs == 0:
        print(f"case {args.case}: equal ({len(a)} items)")
        return 0
    if args.case in DOCUMENTED and not args.tamper:
        reason, patterns = DOCUMENTED[args.case]
        outside = [k for k in differing if not any(fnmatch.fnmatchcase(k, p) for p in patterns)]
        if not outside:
            print(f"case {args.case}: different in {diffs} of {len(a | b)} items, documented: {reason}")
            return 0
        print(f"case {args.case}: {len(outside)} differing items are not the documented divergence's "
              f"({' '.join(patterns)}): {' '.join(outside)}")
    print(f"case {args.case}: DIFFERENT in {diffs} of {len(a | b)} items")
    return 1


def cmd_summary(args):
    with open(args.file) as f:
        got = json.load(f)
    for pod, e in got["pods"].items():
        a = e["admission"]
        print(f"  {pod}: " + (a if isinstance(a, str) else f"refused: {a['refused']}: {a['message']}"))
        for c, k in (e.get("containers") or {}).items():
            print(f"    {c}: cpuset.cpus={k['cpus']} cpuset.mems={k['mems']} quota={k['cpu_quota']}")


def cmd_probe(args):
    """A tamper spec for the first container of a run: its cpuset.mems made wrong."""
    with open(args.file) as f:
        got = json.load(f)
    for pod, e in sorted(got["pods"].items()):
        for c, k in sorted((e.get("containers") or {}).items()):
            print(f"pods.{pod}.containers.{c}.mems={k['mems']}9")
            return 0
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("cases")
    p = sub.add_parser("prepare")
    p.add_argument("case")
    p.add_argument("dir")
    p.add_argument("--image", required=True)
    p = sub.add_parser("settle")
    p.add_argument("pod")
    p.add_argument("--pods", required=True)
    p.add_argument("--placement")
    p.add_argument("--timeout", type=float, default=300)
    p = sub.add_parser("gone")
    p.add_argument("pod")
    p.add_argument("--pods", required=True)
    p.add_argument("--timeout", type=float, default=300)
    p = sub.add_parser("collect")
    p.add_argument("--mode", choices=["kubelet", "numa-shim"], required=True)
    p.add_argument("--pods", required=True)
    p.add_argument("--crictl", required=True)
    p.add_argument("--podresources", required=True)
    p.add_argument("--placement")
    p.add_argument("--only", help="read this pod only (before a remove step)")
    p.add_argument("--merge", help="readings of removed pods to carry over (collect --only's output)")
    p.add_argument("--out")
    p = sub.add_parser("compare")
    p.add_argument("case")
    p.add_argument("kubelet")
    p.add_argument("shim")
    p.add_argument("--tamper", action="append")
    for name in ("summary", "probe"):
        sub.add_parser(name).add_argument("file")
    args = ap.parse_args()
    return {"summary": cmd_summary, "probe": cmd_probe, "cases": cmd_cases, "prepare": cmd_prepare, "settle": cmd_settle, "gone": cmd_gone,
            "collect": cmd_collect, "compare": cmd_compare}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
