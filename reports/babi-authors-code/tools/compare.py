"""Compare a run's JSON lines with the committed log's first lines: every field but "seconds".
Usage: python3 compare.py RUN.jsonl [COMMITTED.jsonl]"""
import json, sys
run = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref_path = sys.argv[2] if len(sys.argv) > 2 else "/work/main/reports/babi-authors-code/validation-logs/qa17-seed0.jsonl"
ref = [json.loads(l) for l in open(ref_path) if l.strip()][: len(run)]
same = 0
for a, b in zip(run, ref):
    diff = [k for k in b if k != "seconds" and a.get(k) != b[k]]
    same += not diff
    print(f"step {a['step']:>6}: {'identical' if not diff else 'DIFFERENT: ' + ', '.join(diff)}  (valid_acc {a['valid_acc']:.3f} vs {b['valid_acc']:.3f})")
print(f"{same} of {len(run)} lines identical (all fields but seconds) against the first {len(ref)} lines of {ref_path}")
