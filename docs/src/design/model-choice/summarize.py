#!/usr/bin/env python3
"""Quality per second from the runs.csv files of measure.sh's output directories."""
import csv, sys
from collections import defaultdict

def table(path, title):
    rows = list(csv.DictReader(open(path)))
    agg = defaultdict(lambda: {"n": 0, "q": 0.0, "s": 0.0, "tok": 0})
    for r in rows:
        if r["error"] or not r["rubric_overall"]:
            continue
        a = agg[r["strategy"]]
        a["n"] += 1
        a["q"] += float(r["rubric_overall"])
        a["s"] += int(r["wall_ms"]) / 1000
        a["tok"] += int(r["completion_tokens"])
    print(f"\n{title} ({path})\n")
    print("| strategy | problems | rubric (1-10, mean) | wall s / problem | quality per second (rubric / wall s) | completion tokens / problem |")
    print("|---|---|---|---|---|---|")
    for k, a in sorted(agg.items()):
        q, s = a["q"] / a["n"], a["s"] / a["n"]
        print(f"| {k} | {a['n']} | {q:.2f} | {s:.1f} | {q / s:.3f} | {a['tok'] / a['n']:.0f} |")

for arg in sys.argv[1:]:
    path, _, title = arg.partition("=")
    table(path, title or path)
