#!/usr/bin/env bash
# check.sh: the sample DRA driver against the running loopback control plane (lib/apiserver.sh,
# IT_CP under IT_RUN; apiserver-tests.sh calls it): a DeviceClass for its driver (and a Node
# object for IT_NODE_NAME when no kubelet registered one), then the driver
# publishes its ResourceSlice for IT_NODE_NAME, whose devices carry the standard
# resource.kubernetes.io/numaNode and the driver's numaNode and pcieRoot attributes of its config (the DeviceClass's CEL selector on numaNode is accepted by the API
# server). The slice and the class are removed after. Prints what it saw; exit 0 when all of it holds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=integration/lib/common.sh
source "$here/../lib/common.sh"
# shellcheck source=integration/lib/apiserver.sh
source "$here/../lib/apiserver.sh"
"$here/build.sh"
work=$(mktemp -d)
pid=""
made_node=0
cleanup() {
    ((made_node)) && it_kubectl delete node "$IT_NODE_NAME" --ignore-not-found >/dev/null 2>&1
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    it_kubectl delete resourceslices --field-selector spec.driver=gpu.example.com --ignore-not-found >/dev/null 2>&1 || true
    it_kubectl delete deviceclass gpu-numa1.example.com --ignore-not-found >/dev/null 2>&1 || true
    rm -rf "$work"
    return 0
}
trap cleanup EXIT
# summary: "<node>/<pool> <device> numaNode=N standard=N pcieRoot=R" per published device, sorted.
summary() {
    python3 -c '
import json, sys
lines = []
for s in json.load(sys.stdin)["items"]:
    for d in s["spec"].get("devices", []):
        a = d.get("attributes", {})
        lines.append("%s/%s %s numaNode=%s standard=%s pcieRoot=%s" % (s["spec"].get("nodeName"), s["spec"]["pool"]["name"],
            d["name"], a.get("numaNode", {}).get("int"), a.get("resource.kubernetes.io/numaNode", {}).get("int"),
            a.get("pcieRoot", {}).get("string")))
print("\n".join(sorted(lines)))'
}
cat >"$work/config.json" <<'EOS'
{"driver": "gpu.example.com", "devices": [
  {"name": "gpu0", "numa": 0, "pcieRoot": "pci0000:00"},
  {"name": "gpu1", "numa": 1, "pcieRoot": "pci0000:80"}]}
EOS
# The library publishes a node's slices owned by its Node: without a kubelet registered here,
# a Node object stands in (removed after).
if ! it_kubectl get node "$IT_NODE_NAME" >/dev/null 2>&1; then
    it_kubectl create -f - <<EOS
apiVersion: v1
kind: Node
metadata:
  name: $IT_NODE_NAME
EOS
    made_node=1
fi
it_kubectl apply -f - <<'EOS'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu-numa1.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].numaNode == 1
EOS
"$IT_BIN/dra-driver" -kubeconfig "$IT_CP/admin.kubeconfig" -node "$IT_NODE_NAME" -config "$work/config.json" \
    -registrar-dir "$work/plugins_registry" -plugin-dir "$work/plugins/gpu.example.com" >"$work/driver.log" 2>&1 &
pid=$!
for ((i = 0; i < 150; i++)); do
    slices=$(it_kubectl get resourceslices --field-selector spec.driver=gpu.example.com -o json 2>/dev/null || true)
    [[ $(summary <<<"$slices" 2>/dev/null) == *gpu1* ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/driver.log"; exit 1; }
    sleep 0.2
done
cat "$work/driver.log"
seen=$(summary <<<"$slices")
printf "published:\n%s\n" "$seen"
want="$IT_NODE_NAME/$IT_NODE_NAME gpu0 numaNode=0 standard=0 pcieRoot=pci0000:00
$IT_NODE_NAME/$IT_NODE_NAME gpu1 numaNode=1 standard=1 pcieRoot=pci0000:80"
[[ $seen == "$want" ]] || { printf "want:\n%s\n" "$want"; exit 1; }
echo "ok: the ResourceSlice names each device's NUMA node and PCIe root"
