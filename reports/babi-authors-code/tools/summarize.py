#!/usr/bin/env python3
"""Summarise the authors'-code runs in /work/authors/runs/qa{N}-seed{S}.jsonl (one line per validation).

Per task and seed: the test error (%) at the validation of best validation accuracy (ties: the first) under
  (a) every validation up to 21,300 steps (300 epoch-equivalents of a 9,000-question train set at batch 128);
  (b) every validation up to 7,100 steps (100 epoch-equivalents);
  (c) tprbench's study rule emulated: patience 10 epoch-equivalents (710 steps) counted from the start, i.e. a
      validation is seen only while its step <= (step of the best so far, 0 at the start) + 710, and a cap of
      7,100 steps (100 epochs); the validations are every 200 steps, so this is the rule at 200-step granularity;
plus the validation accuracy at steps 7,100, 14,200 and 21,300 (the last validation at or before that step:
7,000 / 14,200 / 21,300), the NaN warm-up restarts seen in the run's terminal log, and per task the mean ± std
(sample std, ddof = 1) and the count of seeds with error > 5%. Partial runs are shown and marked, and left out
of the means. "step" is the authors' _total_steps: the validation at step s follows s + 1 updates.

Usage: python3 summarize.py [--runs DIR] [--tasks 17,19,...]
"""
import argparse
import glob
import json
import math
import os
import re
import statistics

BUDGET, CAP100, PATIENCE = 21300, 7100, 710
MARKS = (7100, 14200, 21300)


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line being written
                    pass
    return sorted(rows, key=lambda r: r["step"])


def best(rows):
    """First row of maximal valid_acc (NaN accuracies never win)."""
    out = None
    for r in rows:
        if not math.isnan(r["valid_acc"]) and (out is None or r["valid_acc"] > out["valid_acc"]):
            out = r
    return out


def patience_rule(rows, patience=PATIENCE, cap=CAP100):
    out, last_best_step = None, 0
    for r in rows:
        if r["step"] > cap or r["step"] > last_best_step + patience:
            break
        if not math.isnan(r["valid_acc"]) and (out is None or r["valid_acc"] > out["valid_acc"]):
            out, last_best_step = r, r["step"]
    return out


def err(r):
    return None if r is None else 100.0 * (1.0 - r["test_acc"])


def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"


def at(rows, step):
    prior = [r for r in rows if r["step"] <= step]
    return prior[-1] if prior else None


def restarts(out_path):
    if not os.path.exists(out_path):
        return "?"
    text = open(out_path, errors="replace").read()
    n = text.count("NaN cost during warmup")
    late = len(re.findall(r"cost=\s*nan", text))
    return f"{n}" + (f" (+{late} NaN costs logged)" if late else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs"))
    ap.add_argument("--tasks", default=None)
    a = ap.parse_args()
    runs = {}
    for path in glob.glob(os.path.join(a.runs, "qa*-seed*.jsonl")):
        m = re.fullmatch(r"qa(\d+)-seed(\d+)\.jsonl", os.path.basename(path))
        if m:
            runs.setdefault(int(m.group(1)), {})[int(m.group(2))] = path
    tasks = sorted(runs) if not a.tasks else [int(t) for t in a.tasks.split(",")]
    for task in tasks:
        print(f"\n## qa{task} (authors' code; test error % at the best validation accuracy)\n")
        print("| seed | steps done | (a) ≤21,300: err (best step, valid acc) | (b) ≤7,100: err (step) | (c) patience 710 + cap 7,100: err (step) "
              "| valid acc @7,100 / @14,200 / @21,300 | NaN warm-up restarts |")
        print("|---|---|---|---|---|---|---|")
        cols = {"a": [], "b": [], "c": []}
        for seed in sorted(runs.get(task, {})):
            path = runs[task][seed]
            rows = [r for r in load(path) if r["step"] <= BUDGET]
            if not rows:
                print(f"| {seed} | 0 | | | | | |")
                continue
            done = rows[-1]["step"] >= BUDGET
            ra, rb, rc = best(rows), best([r for r in rows if r["step"] <= CAP100]), patience_rule(rows)
            marks = " / ".join(fmt(at(rows, s)["valid_acc"], 3) if at(rows, s) and rows[-1]["step"] >= s else "–" for s in MARKS)
            status = f"{rows[-1]['step']}" + ("" if done else " (partial)")
            print(f"| {seed} | {status} | {fmt(err(ra))} ({ra['step']}, {ra['valid_acc']:.3f}) | {fmt(err(rb))} ({rb['step'] if rb else '–'}) "
                  f"| {fmt(err(rc))} ({rc['step'] if rc else '–'}) | {marks} | {restarts(path[:-6] + '.out')} |")
            if done:
                cols["a"].append(err(ra)); cols["b"].append(err(rb)); cols["c"].append(err(rc))
        n = len(cols["a"])
        if n:
            def ms(v):
                sd = statistics.stdev(v) if len(v) > 1 else 0.0
                return f"{statistics.mean(v):.1f} ± {sd:.1f}, failed (> 5%) {sum(x > 5 for x in v)}/{len(v)}"
            print(f"\nfinished seeds: {n}.  (a) ≤21,300: {ms(cols['a'])}.  (b) ≤7,100: {ms(cols['b'])}.  (c) patience+cap: {ms(cols['c'])}.")
            print("per seed (a): " + " ".join(fmt(x) for x in cols["a"]) + " | (b): " + " ".join(fmt(x) for x in cols["b"])
                  + " | (c): " + " ".join(fmt(x) for x in cols["c"]))


if __name__ == "__main__":
    main()
