"""Write tprbench's bAbI carve (tasks/babi/data.py) as bAbI-format files the authors' reader parses.

For each task N: qaN_train.txt = the first n - n_valid stories of the 10k train file (qa3: the 1k file,
as tprbench's fallback_1k), qaN_valid.txt = its last n_valid stories with
n_valid = int(0.1 * n + 0.5) (tprbench's _valid_stories, round half up), qaN_test.txt = the test file.
Lines are copied verbatim. Usage: python make_data.py [task ...]   (default: 1-20)
"""
import glob
import os
import sys

SRC = "/work/shared/data/babi"
OUT = "/work/authors/data"


def stories(path):
    """Raw line blocks, a new block at every line whose id is 1 (as both readers)."""
    blocks = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            if int(line.strip().split(" ", 1)[0]) == 1:
                blocks.append([])
            blocks[-1].append(line if line.endswith("\n") else line + "\n")
    return blocks


def one(task):
    train_files = glob.glob(f"{SRC}/en-10k/qa{task}_*_train.txt") or glob.glob(f"{SRC}/en/qa{task}_*_train.txt")
    test_files = glob.glob(f"{SRC}/en-10k/qa{task}_*_test.txt")
    assert len(train_files) == 1 and len(test_files) == 1, (task, train_files, test_files)
    train = stories(train_files[0])
    n_valid = int(0.1 * len(train) + 0.5)
    parts = {"train": train[: len(train) - n_valid], "valid": train[len(train) - n_valid :], "test": stories(test_files[0])}
    for split, blocks in parts.items():
        with open(os.path.join(OUT, f"qa{task}_{split}.txt"), "w") as f:
            for block in blocks:
                f.writelines(block)
        q = sum(1 for b in blocks for l in b if "\t" in l)
        print(f"qa{task} {split}: {len(blocks)} stories, {q} questions  (from {os.path.relpath(train_files[0] if split != 'test' else test_files[0], SRC)})")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for t in (sys.argv[1:] or range(1, 21)):
        one(int(t))
