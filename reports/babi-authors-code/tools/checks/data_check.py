"""Compare the carve in /work/authors/data (as the authors' reader parses it) with tprbench's load_babi
(imported read-only from /work/main, no cache, run with PYTHONDONTWRITEBYTECODE=1):
stories and questions per split, vocabulary, and every example's story/question/answer tokens."""
import os, sys, glob
sys.path.insert(0, "/work/main")
sys.path.insert(0, "/work/authors/TPR-RNN/preprocessor")
from tasks.babi.data import load_babi
import reader  # the authors' preprocessor/reader.py (with the # RUN: regex fix)

D = "/work/authors/data"
ok = True
for task in [int(t) for t in (sys.argv[1:] or range(1, 21))]:
    tb = load_babi(tasks=str(task), size="10k", data_dir="/work/shared/data/babi", valid_fraction=0.1, fallback_1k=True)
    window = 130 if task == 3 else 70
    word2id = None
    line = [f"qa{task}"]
    for split, tb_split in (("train", "train"), ("valid", "valid"), ("test", f"qa{task}")):
        path = f"{D}/qa{task}_{split}.txt"
        n_st = sum(1 for l in open(path) if l.split(" ", 1)[0] == "1")
        ex, _, _, word2id = reader.parse_stories(path, word2id)
        s = tb[tb_split]
        batch = s.batch()
        same = len(ex) == len(s)
        if same:
            for i, (story, q, a) in enumerate(ex):
                story = story[-window:]
                L = int(batch["lengths"][i])
                tb_story = [tb.decode(batch["stories"][i, j]).split() for j in range(L)]
                if tb_story != story or tb.decode(batch["question"][i]).split() != q or tb.vocab[int(batch["answer"][i])] != a:
                    same = False
                    print("  mismatch", split, i, story[-2:], q, a, tb_story[-2:])
                    break
        ok &= same
        line.append(f"{split}: {n_st} stories / {len(ex)} questions (tprbench {len(s)}) {'identical' if same else 'DIFFERENT'}")
    v_auth = set(word2id) - {"PAD_ID"}; v_tb = set(tb.vocab[1:])
    line.append(f"vocab {len(v_auth)}+PAD (tprbench {len(v_tb)}+PAD) {'same' if v_auth == v_tb else 'DIFFERENT'}; tprbench oov {tb.oov}")
    ok &= v_auth == v_tb
    print(" | ".join(line))
print("ALL IDENTICAL" if ok else "DIFFERENCES FOUND")
