"""Turn a lingvo trainer log (stderr) into one JSON line per training step, then summarise a step range.

Their trainer prints every step's metrics (lingvo/trainer.py:489-491, `step:N key:value ...`), the training
loss with dropout on. Usage:

    python steplog.py RUN.log > RUN.jsonl            # per-step lines
    python steplog.py --summary RUN.jsonl [--first A] [--last B]  # training perplexity (token-weighted), mean isometry

Ours, not the authors': it only reads their log.
"""

import argparse
import json
import math
import re
import sys

# absl's prefix; the same line comes from trainer.py and from base_runner.py's status message
STEP = re.compile(r"^I\d{4} (\d\d:\d\d:\d\d\.\d+) +\d+ \S+\.py:\d+\] step:\s*(\d+) (.*)$")


def steps(lines):
    """{step, time, metric: value} for each logged training step, in step order (each step once: the last line wins)."""
    seen = {}
    for line in lines:
        m = STEP.match(line)
        if not m:
            continue
        row = {"step": int(m.group(2)), "time": m.group(1)}
        for item in m.group(3).split():
            key, _, value = item.partition(":")
            row[key] = float(value)
        if "log_pplx" in row:
            seen[row["step"]] = row
    return [seen[k] for k in sorted(seen)]


def summary(rows, first, last):
    """Training perplexity over steps first..last (weighted by predicted tokens) and the mean isometry term."""
    rows = [r for r in rows if first <= r["step"] <= last]
    tokens = sum(r["num_predictions"] for r in rows)
    nll = sum(r["log_pplx"] * r["num_predictions"] for r in rows) / tokens
    out = {"steps": f"{rows[0]['step']}-{rows[-1]['step']}", "logged": len(rows), "train_ppl": math.exp(nll)}
    if "isometric" in rows[0]:
        out["isometric_mean"] = sum(r["isometric"] for r in rows) / len(rows)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--summary", action="store_true", help="PATH is a .jsonl from this script: print the summary")
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--last", type=int, default=10**9)
    a = ap.parse_args()
    if a.summary:
        rows = [json.loads(x) for x in open(a.path)]
        print(json.dumps(summary(rows, a.first, a.last)))
        return
    for row in steps(open(a.path, errors="replace")):
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
