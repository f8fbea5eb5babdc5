#!/usr/bin/env python3
"""Writes a `numa-shim simulate` scenario for the wide-machine table of docs/PERFORMANCE.md
(issue 25): two sockets, NODES NUMA nodes of 2 cores x 2 threads, Static memory policy, the given
topology policy and scope, max-allowable-numa-nodes set to NODES, PODS pod-level pods of 3-11
CPUs (seeded, reproducible) each with a sidecar.

usage: scenario.py NODES POLICY [SCOPE=pod] [PODS=20] [SEED=25] > scenario.yaml
       numa-shim simulate scenario.yaml --output table
"""
import json
import random
import sys

nodes = int(sys.argv[1])
policy = sys.argv[2]
scope = sys.argv[3] if len(sys.argv) > 3 else "pod"
pods = int(sys.argv[4]) if len(sys.argv) > 4 else 20
rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 25)
cores_per_node, threads = 2, 2
cores = nodes * cores_per_node
cpus = []
for t in range(threads):
    for core in range(cores):
        numa = core // cores_per_node
        cpus.append({"id": t * cores + core, "core": core, "socket": numa * 2 // nodes,
                     "die": 0, "numa": numa, "uncore": numa})
cpus.sort(key=lambda c: c["id"])
numa = [{"id": i, "memory": 16 << 30, "hugepages": {},
         "distances": [10 if i == j else (12 if i * 2 // nodes == j * 2 // nodes else 32)
                       for j in range(nodes)]} for i in range(nodes)]


def res(cpu, mem):
    return {"requests": {"cpu": str(cpu), "memory": f"{mem}Gi"},
            "limits": {"cpu": str(cpu), "memory": f"{mem}Gi"}}


manifests = []
for i in range(pods):
    c = rng.randint(3, 11)
    manifests.append({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"wide-{i}", "uid": f"wide-{i}"},
        "spec": {
            "resources": res(c, c),
            "initContainers": [{"name": "sidecar", "image": "pause", "restartPolicy": "Always"}],
            "containers": [{"name": "app", "image": "pause", "resources": res(c - 1, c - 1)}],
        }})
scenario = {
    "topology": {"cpus": cpus, "numa": numa},
    "kubelet": {
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": "0",
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
        "topologyManagerPolicy": policy,
        "topologyManagerScope": scope,
        "topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(nodes)},
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    },
    "pods": manifests,
}
json.dump(scenario, sys.stdout, indent=1)
