#!/usr/bin/env python3
"""Filters `crictl events -o json` output to the events of one pod: those whose sandbox has that
name, or whose container id is one of IDS (a deleted sandbox's event carries no sandbox status).

usage: events_of.py POD_NAME [IDS...] < events > kept
Lines that are not part of a JSON event (errors, logs) are kept as they are.
"""
import json
import sys


def main() -> int:
    name = sys.argv[1]
    ids = set(sys.argv[2:])
    text = sys.stdin.read()
    decoder = json.JSONDecoder()
    pos = 0
    out = []
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        if text[pos] == "{":
            try:
                event, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                event, end = None, pos
            if event is not None:
                pod = (event.get("podSandboxStatus") or {}).get("metadata") or {}
                if pod.get("name") == name or event.get("containerId") in ids:
                    out.append(text[pos:end])
                pos = end
                continue
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        out.append(text[pos:end].rstrip("\n"))
        pos = end
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
