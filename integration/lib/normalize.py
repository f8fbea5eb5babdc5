#!/usr/bin/env python3
"""Normalises crictl output so two runs of the same sequence can be diffed.

Replaces what legitimately differs between runs (ids, times, pids, ports, netns names, resource
usage counters) with stable tokens. Ids map to <ID1>, <ID2>, ... in order of first appearance, kept
in STATE (a JSON file) across the steps of one run, so a pod id is the same token in every step.

usage: normalize.py STATE [--numbers] < raw > normalised
  --numbers  also replace every number (for stats, whose counters move between runs)
"""
import json
import os
import re
import sys

HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
HEX13 = re.compile(r"\b[0-9a-f]{13}\b")
# CRI-O names a pod's host after the first 12 hex digits of its sandbox id.
HEX12 = re.compile(r"\b[0-9a-f]{12}\b")
# A JSON object kept as a string value on a line of its own (CRI-O's io.kubernetes.cri-o.Labels
# and similar annotations): its keys come in no fixed order.
JSON_IN_STRING = re.compile(r'^(\s*"[^"]*": )("\{.*\}")(,?)$', re.M)
RULES = [
    # klog line headers: severity, date, time, thread id.
    (re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", re.M), "<KLOG> "),
    # RFC 3339 times and crictl's relative times.
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"), "<TIME>"),
    (re.compile(r"(About an?|Less than a|\d+) (second|minute|hour)s? ago"), "<AGO>"),
    # Unix times in seconds or nanoseconds, as JSON numbers or strings.
    (re.compile(r"\b1\d{9}(\d{9})?\b"), "<UNIX>"),
    (re.compile(r'("pid"\s*:\s*)\d+'), r"\1<PID>"),
    (re.compile(r"cni-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "cni-<UUID>"),
    # CRI-O's namespace files (<namespaces_dir>/netns/<uuid>).
    (re.compile(r"/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "/<UUID>"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<PORT>"),
    (re.compile(r"/proc/\d+/"), "/proc/<PID>/"),
]
# Lists a runtime fills from a Go map, so their order changes from one call to the next
# (CRI-O's `crictl info` runtimeHandlers).
UNORDERED_LISTS = ("runtimeHandlers",)
NUMBER = re.compile(r"(?<![A-Za-z<_])\d+(\.\d+)?(?![A-Za-z>_])")


def sort_unordered(text: str) -> str:
    """Sorts the UNORDERED_LISTS of a JSON document (left as it is when it is not one)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, dict) or not any(isinstance(doc.get(k), list) for k in UNORDERED_LISTS):
        return text
    for key in UNORDERED_LISTS:
        if isinstance(doc.get(key), list):
            doc[key].sort(key=lambda item: json.dumps(item, sort_keys=True))
    return json.dumps(doc, indent=2) + "\n"


def main() -> int:
    state_path = sys.argv[1]
    numbers = "--numbers" in sys.argv[2:]
    ids = {}
    if os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as f:
            ids = json.load(f)
    text = sys.stdin.read()

    def full(m: re.Match) -> str:
        key = m.group(0)
        if key not in ids:
            ids[key] = f"<ID{len(ids) + 1}>"
        return ids[key]

    def short(m: re.Match) -> str:
        for key, token in ids.items():
            if key.startswith(m.group(0)):
                return token
        return m.group(0)

    def sorted_json(m: re.Match) -> str:
        try:
            value = json.loads(json.loads(m.group(2)))
        except ValueError:
            return m.group(0)
        if not isinstance(value, dict):
            return m.group(0)
        return m.group(1) + json.dumps(json.dumps(value, sort_keys=True, separators=(",", ":"))) + m.group(3)

    text = sort_unordered(text)
    text = JSON_IN_STRING.sub(sorted_json, text)
    text = HEX64.sub(full, text)
    text = HEX13.sub(short, text)
    text = HEX12.sub(short, text)
    for pattern, repl in RULES:
        text = pattern.sub(repl, text)
    if numbers:
        text = NUMBER.sub("<N>", text.replace("<UNIX>", "0"))
    with open(state_path, "w", encoding="utf-8") as f:
        json.dump(ids, f)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
