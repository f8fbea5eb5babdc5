"""summary.md of integration/bench-relay.sh from its results.jsonl.

Usage: bench_summary.py RESULTS_JSONL [pods]   (with `pods`, only the pod start table)

Every figure is min / median / max over rounds (Version: one batch per target, client count and
round; "added" is the target's figure minus direct's in the same round), or over pods (pod
start: pod i of each side ran back to back, so ratios are taken pairwise). Target checks are
ratios of medians from the same run, as issue 13 states them.
"""

import json
import statistics
import sys
from collections import defaultdict

SHIMS = ("shim-on", "shim-off")
FLOORS = ("floor-c", "floor-rust")
GO_PEERS = ("go-proxy", "go-cri")
ORDER = ("direct",) + SHIMS + GO_PEERS + FLOORS


def mmm(values, fmt="{:.0f}"):
    """min / median / max, or a dash."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def verdict(ratio, limit):
    if ratio is None:
        return "–"
    return f"{ratio:.2f}× ({'met' if ratio <= limit else 'MISSED'}, target ≤ {limit}×)"


def load(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    by_test = defaultdict(list)
    for r in rows:
        by_test[r["test"]].append(r)
    return by_test


def version_section(rows):
    # (clients, target) -> list of rows; (clients, round) -> direct row
    cells = defaultdict(list)
    direct = {}
    for r in rows:
        cells[(r["clients"], r["target"])].append(r)
        if r["target"] == "direct":
            direct[(r["clients"], r["round"])] = r
    medians = {}
    for c in sorted({k[0] for k in cells}):
        rounds = len(cells[(c, "direct")])
        print(f"### Version, {c} client{'s' if c > 1 else ''} ({rounds} round{'s' if rounds > 1 else ''})\n")
        print("| target | p50 µs | p99 µs | added p50 µs | added p99 µs | calls/s | relay CPU µs/call | containerd CPU µs/call |")
        print("| --- | --: | --: | --: | --: | --: | --: | --: |")
        for t in ORDER:
            rs = cells.get((c, t))
            if not rs:
                continue
            added50 = [r["p50_us"] - direct[(c, r["round"])]["p50_us"] for r in rs if (c, r["round"]) in direct]
            added99 = [r["p99_us"] - direct[(c, r["round"])]["p99_us"] for r in rs if (c, r["round"]) in direct]
            cpu = [r.get("cpu_us_per_call") for r in rs] if t != "direct" else []
            medians[(c, t)] = {"added50": med(added50), "cpu": med(cpu)}
            print(f"| {t} | {mmm([r['p50_us'] for r in rs])} | {mmm([r['p99_us'] for r in rs])} | "
                  f"{mmm(added50) if t != 'direct' else ''} | {mmm(added99) if t != 'direct' else ''} | "
                  f"{mmm([r['calls_per_s'] for r in rs])} | {mmm(cpu, '{:.1f}')} | "
                  f"{mmm([r.get('runtime_cpu_us_per_call') for r in rs], '{:.1f}')} |")
        print()
    return medians


def ratio(medians, key, a, b):
    x, y = medians.get(a, {}).get(key), medians.get(b, {}).get(key)
    if x is None or not y:
        return None
    return x / y


def ratios_section(medians):
    counts = sorted({k[0] for k in medians})
    print("### Ratios of medians (numa-shim / other)\n")
    print("| numa-shim | clients | figure | " + " | ".join(FLOORS + GO_PEERS) + " |")
    print("| --- | --: | --- | " + " | ".join("--:" for _ in FLOORS + GO_PEERS) + " |")
    for s in SHIMS:
        for c in counts:
            for key, label in (("cpu", "CPU per call"), ("added50", "added p50")):
                cells = []
                for o in FLOORS + GO_PEERS:
                    r = ratio(medians, key, (c, s), (c, o))
                    cells.append(f"{r:.2f}" if r is not None else "–")
                print(f"| {s} | {c} | {label} | " + " | ".join(cells) + " |")
    print()


def pods_section(rows):
    by = defaultdict(dict)
    for r in rows:
        by[r["target"]][r["i"]] = r
    if "direct" not in by:
        return {}
    print("### Pod start (RunPodSandbox + CreateContainer + StartContainer)\n")
    print("| target | pods | total ms | RunPodSandbox ms | CreateContainer ms | StartContainer ms | median pairwise ratio to direct | median pairwise added ms (run / create / start) |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: |")
    paired = {}
    for t in ["direct"] + sorted(t for t in by if t != "direct"):
        rs = list(by[t].values())
        cols = [mmm([r[k] for r in rs], "{:.1f}") for k in ("total_ms", "run_ms", "create_ms", "start_ms")]
        ratio_cell = added_cell = ""
        if t != "direct":
            pairs = [(by[t][i], by["direct"][i]) for i in by[t] if i in by["direct"]]
            paired[t] = statistics.median(a["total_ms"] / b["total_ms"] for a, b in pairs)
            ratio_cell = f"{paired[t]:.3f}"
            added_cell = " / ".join(
                f"{statistics.median(a[k] - b[k] for a, b in pairs):+.1f}" for k in ("run_ms", "create_ms", "start_ms"))
        print(f"| {t} | {len(rs)} | " + " | ".join(cols) + f" | {ratio_cell} | {added_cell} |")
    print()
    return paired


def relay_time_section(rows, writes):
    """numa-shim's own time per method over the whole run (its relay histograms)."""
    if not rows:
        return
    print("numa-shim's own relay metrics over the whole run (mean ms per call: inside numa-shim / waiting for containerd):\n")
    print("| numa-shim | method | calls | inside numa-shim ms | runtime ms |")
    print("| --- | --- | --: | --: | --: |")
    for r in sorted(rows, key=lambda r: (r["target"], r["method"])):
        if r["method"] == "Version":
            continue
        print(f"| {r['target']} | {r['method']} | {r['n']} | {r['shim_ms_mean']:.2f} | {r['runtime_ms_mean']:.2f} |")
    for w in writes:
        print(f"\n{w['target']}: {w['n']} checkpoint writes.", end="")
    print("\n")


def memory_section(rows):
    mem = defaultdict(dict)
    for r in rows:
        mem[r["target"]][r["phase"]] = r
    print("### Memory (VmRSS from /proc, MiB)\n")
    print("| target | idle at start | after the Version load | idle at the end | peak (VmHWM) | threads |")
    print("| --- | --: | --: | --: | --: | --: |")
    for t in ORDER:
        if t not in mem:
            continue
        m = mem[t]
        cell = lambda p: f"{m[p]['rss_kib'] / 1024:.1f}" if p in m else "–"
        last = m.get("idle-end") or m.get("after-load") or m.get("idle")
        print(f"| {t} | {cell('idle')} | {cell('after-load')} | {cell('idle-end')} | "
              f"{last['hwm_kib'] / 1024:.1f} | {last['threads']} |")
    print()
    return mem


def instructions_section(rows):
    if not rows:
        return {}
    ir = {(r["clients"], r["target"]): r["ir_per_call"] for r in rows}
    print("### Instructions per relayed Version call (callgrind, each relay alone)\n")
    print("User-space instructions only: callgrind does not see the kernel, where a byte relay")
    print("spends nearly all its time, so the floors' counts are no yardstick; compare the Go peers.\n")
    print("| clients | " + " | ".join(t for t in ORDER if t != "direct") + " |")
    print("| --: | " + " | ".join("--:" for t in ORDER if t != "direct") + " |")
    for c in sorted({k[0] for k in ir}):
        print(f"| {c} | " + " | ".join(f"{ir[(c, t)]:,.0f}" if (c, t) in ir else "–" for t in ORDER if t != "direct") + " |")
    print()
    return ir


def targets_section(medians, paired, mem, ir):
    print("### Issue 13 targets (ratios of medians in this run)\n")
    for s in SHIMS:
        for f in FLOORS:
            print(f"- {s}, CPU per call at 16 clients vs {f}: {verdict(ratio(medians, 'cpu', (16, s), (16, f)), 2)}")
        for g in GO_PEERS:
            print(f"- {s}, CPU per call at 16 clients vs {g}: {verdict(ratio(medians, 'cpu', (16, s), (16, g)), 0.5)}")
        for f in FLOORS:
            print(f"- {s}, added p50 at 16 clients vs {f}: {verdict(ratio(medians, 'added50', (16, s), (16, f)), 2)}")
            print(f"- {s}, added p50 at 1 client vs {f}: {verdict(ratio(medians, 'added50', (1, s), (1, f)), 2.5)}")
        for c in sorted({k[0] for k in ir}):
            for o in GO_PEERS:
                if (c, s) in ir and (c, o) in ir:
                    print(f"- {s}, instructions per call at {c} client{'s' if c > 1 else ''} vs {o}: {ir[(c, s)] / ir[(c, o)]:.2f}× (no target)")
        if s == "shim-on" and s in paired:
            print(f"- {s}, pod start, median pairwise ratio to direct: {verdict(paired[s], 1.02)}")
        elif s in paired:
            print(f"- {s}, pod start, median pairwise ratio to direct: {paired[s]:.2f}× (the control; no target)")
        for phase, when in (("idle", "at start"), ("idle-end", "after the runs")):
            rss = lambda t: mem.get(t, {}).get(phase, {}).get("rss_kib")
            if rss(s) and all(rss(g) for g in GO_PEERS):
                peers = ", ".join(f"{g} {rss(g) / 1024:.1f}" for g in GO_PEERS)
                ok = all(rss(s) < rss(g) for g in GO_PEERS)
                print(f"- {s}, idle RSS {when} {rss(s) / 1024:.1f} MiB vs {peers} MiB: "
                      f"{'met' if ok else 'MISSED'} (target: below every Go peer)")
    print()


def main():
    by_test = load(sys.argv[1])
    if sys.argv[2:] == ["pods"]:
        pods_section(by_test["pod"])
        return
    medians = version_section(by_test["version"]) if by_test["version"] else {}
    if medians:
        ratios_section(medians)
    paired = pods_section(by_test["pod"])
    relay_time_section(by_test["relay-time"], by_test["checkpoint-writes"])
    mem = memory_section(by_test["memory"]) if by_test["memory"] else {}
    ir = instructions_section(by_test["instructions"])
    targets_section(medians, paired, mem, ir)


if __name__ == "__main__":
    main()
