"""Summarise a py-spy raw profile (`py-spy record -f raw --threads`): each function's share of the busy samples
(samples whose leaf is a wait, a lock or a selector are idle and left out), inclusive and self.

    py-spy record -o prof.txt -f raw -r 500 --threads -- .venv/bin/python loop.py ARTIFACT VARIANT SECONDS REQUESTS.jsonl
    python benchmarks/results/tokenise-batch-cpu-2core/profile.py prof.txt
"""
import sys
from collections import Counter

IDLE = ("wait (threading", "acquire", "select", "_worker (concurrent", "get (queue")


def name(frame: str) -> str:
    fn, _, where = frame.partition(" (")
    return f"{fn} ({where.split(':')[0].split('/')[-1]})" if where else fn


incl, own, busy = Counter(), Counter(), 0
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    frames = stack.split(";")
    if any(w in frames[-1] for w in IDLE):
        continue
    busy += int(n)
    own[name(frames[-1])] += int(n)
    for f in set(map(name, frames[1:])):
        incl[f] += int(n)
print(f"busy samples {busy}")
for label, c in (("inclusive", incl), ("self", own)):
    print(f"| {label} | share of busy samples |\n|---|---:|")
    for k, v in c.most_common(12):
        print(f"| {k} | {v / busy:.1%} |")
