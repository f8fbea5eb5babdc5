"""Where numa-shim's time in a pod start goes, from its debug log and (optionally) an strace.

Usage: bench_podstart.py NUMA_SHIM_LOG [STRACE_FILE]

The log must come from `RUST_LOG=numa_shim=debug,info` (text format). For every intercepted
call, the relay logs (inside the call's `cri{method=...}` span) "request patched" when the
hook's `before` is done, "runtime answered" when the runtime's reply is in and the hook's
`after` starts, and "answered elapsed_us=N" when the reply goes back. So per call:

  before   = patched - start     decode, placement decision, checkpoint write(s) before forwarding
  runtime  = runtime answered - patched   (includes numa-shim's forward and read of the reply)
  after    = answered - runtime answered  the hook's after: registry commit, checkpoint, pool update

with start = answered - elapsed. A passthrough call (StartContainer) has only its total. With an
`strace -f -ttt -T -e trace=fsync,fdatasync,rename,openat` of the same process, the time spent in
fsync and rename inside each phase of each call is added. Observed calls (StopPodSandbox, RemovePodSandbox)
are not patched, so their "before" is counted as zero. Prints a Markdown table of medians.
"""

import re
import statistics
import sys
from datetime import datetime

LINE = re.compile(r'^(\S+Z)\s+\w+\s+cri\{method="/runtime\.v1\.\w+/(\w+)"\}: (\S+): (.*)$')
METHODS = ("RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox", "RemovePodSandbox")


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def calls(log):
    """One dict per call: method, start, patched, runtime, end (epoch seconds)."""
    out, open_call = [], {}
    for line in open(log):
        m = LINE.match(line)
        if not m:
            continue
        t, method, _target, msg = ts(m[1]), m[2], m[3], m[4]
        if method not in METHODS:
            continue
        c = open_call.setdefault(method, {"method": method})
        if msg.startswith("request patched"):
            c["patched"] = t
        elif msg.startswith("runtime answered"):
            c["runtime"] = t
        elif msg.startswith("answered elapsed_us="):
            elapsed = int(re.match(r"answered elapsed_us=(\d+)", msg)[1]) / 1e6
            c["end"], c["start"] = t, t - elapsed
            if "runtime" in c:
                # Observed calls (Stop*, Remove*) are not patched: their hook's before is empty.
                c.setdefault("patched", c["start"])
            out.append(open_call.pop(method))
    return out


def syscalls(strace):
    """(start, duration, name) of every fsync / fdatasync / rename in an strace -ttt -T file."""
    out, pending = [], {}
    pat = re.compile(r"^(\d+)\s+(\d+\.\d+) (\w+)\((.*)$")
    for line in open(strace):
        m = pat.match(line)
        if not m:
            continue
        pid, t, name, rest = m[1], float(m[2]), m[3], m[4]
        if name not in ("fsync", "fdatasync", "rename", "renameat", "renameat2"):
            continue
        if rest.endswith("<unfinished ...>"):
            pending[pid] = (t, name)
            continue
        d = re.search(r"<(\d+\.\d+)>$", rest)
        if d:
            out.append((t, float(d[1]), name))
    # "<... fsync resumed>" lines carry the duration of an unfinished call.
    for line in open(strace):
        m = re.match(r"^(\d+)\s+\d+\.\d+ <\.\.\. (\w+) resumed>.*<(\d+\.\d+)>$", line)
        if m and m[1] in pending:
            t, name = pending.pop(m[1])
            out.append((t, float(m[3]), name))
    return out


def inside(sys_calls, a, b, names):
    return sum(d for t, d, n in sys_calls if a <= t < b and n in names)


DURABLE = ("fsync", "fdatasync", "rename", "renameat", "renameat2")


def phases(c, sc):
    """ms of a call: total, before, runtime, after, and fsync + rename time in before / after."""
    p = {"total": (c["end"] - c["start"]) * 1e3}
    if "patched" in c and "runtime" in c:
        p["before"] = (c["patched"] - c["start"]) * 1e3
        p["runtime"] = (c["runtime"] - c["patched"]) * 1e3
        p["after"] = (c["end"] - c["runtime"]) * 1e3
        if sc:
            p["durable_before"] = inside(sc, c["start"], c["patched"], DURABLE) * 1e3
            p["durable_after"] = inside(sc, c["runtime"], c["end"], DURABLE) * 1e3
    return p


def main():
    cs = calls(sys.argv[1])
    sc = syscalls(sys.argv[2]) if len(sys.argv) > 2 else []
    keys = ("total", "before", "runtime", "after", "durable_before", "durable_after")
    rows = {}
    by_method = {}
    for c in cs:
        p = phases(c, sc)
        by_method.setdefault(c["method"], []).append(p)
        r = rows.setdefault(c["method"], {k: [] for k in keys})
        for k in keys:
            if k in p:
                r[k].append(p[k])
    med = lambda v: f"{statistics.median(v):.2f}" if v else "–"
    print("| method | calls | total | before | runtime | after | fsync + rename in before | fsync + rename in after |")
    print("| --- | --: | --: | --: | --: | --: | --: | --: |")
    for m in METHODS:
        if m in rows:
            print(f"| {m} | {len(rows[m]['total'])} | " + " | ".join(med(rows[m][k]) for k in keys) + " |")
    # The i-th RunPodSandbox and the i-th CreateContainer of one instance belong to one pod (the
    # load generator starts one pod at a time).
    own, durable = [], []
    for run, create in zip(by_method.get("RunPodSandbox", []), by_method.get("CreateContainer", [])):
        if "before" in run and "before" in create:
            own.append(run["before"] + run["after"] + create["before"] + create["after"])
            if sc:
                durable.append(run["durable_before"] + run["durable_after"]
                               + create["durable_before"] + create["durable_after"])
    if own:
        line = (f"\nPer pod start (RunPodSandbox + CreateContainer), numa-shim's own time (before + after): "
                f"min / median / max {min(own):.2f} / {statistics.median(own):.2f} / {max(own):.2f} ms over {len(own)} pods")
        if durable:
            line += f"; of it fsync + rename: median {statistics.median(durable):.2f} ms"
        print(line + ".")
    if sc:
        parts = []
        for what, names in (("fsyncs", ("fsync",)), ("fdatasyncs", ("fdatasync",)),
                            ("renames", ("rename", "renameat", "renameat2"))):
            ms = [d * 1e3 for _, d, n in sc if n in names]
            parts.append(f"{len(ms)} {what}" + (
                f" (median {statistics.median(ms):.2f} ms, max {max(ms):.2f} ms)" if ms else ""))
        print(f"\nIn the whole trace: {', '.join(parts)}.")


if __name__ == "__main__":
    main()
