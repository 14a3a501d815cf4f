"""The bAbI reader (tasks/babi/data.py): reading rules of the authors' reader.py, the valid carve,
the vocabulary, windows, padding, caching, errors; and the real files' story/question counts.

Official sizes (README.original.txt of bAbI v1.2): 1,000 questions per task file in en/ (train and
test) and 10,000 per train file in en-10k/ (its test files are the 1k ones). Story counts are not
published; the table below was counted independently of the reader (`grep -c '^1 '`, a line with
id 1 starts a story) and is the same in both sizes' test files.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from tasks.babi.data import (
    PAD_ID,
    BabiSplit,
    load_babi,
    parse_tasks,
    read_stories,
    story_window,
    tokenize,
)
from tasks.errors import DataError, TaskError

# stories per file: 1k train, 10k train, test (both sizes)
STORIES = {
    1: (200, 2000, 200),
    2: (200, 2000, 200),
    3: (200, None, 200),
    4: (1000, 10000, 1000),
    5: (200, 2000, 200),
    6: (200, 2000, 200),
    7: (200, 2000, 200),
    8: (200, 2000, 200),
    9: (200, 2000, 200),
    10: (200, 2000, 200),
    11: (200, 2000, 200),
    12: (200, 2000, 200),
    13: (200, 2000, 200),
    14: (200, 2000, 200),
    15: (250, 2500, 250),
    16: (1000, 10000, 1000),
    17: (125, 1250, 125),
    18: (198, 1978, 199),
    19: (1000, 10000, 1000),
    20: (94, 933, 93),
}


# --------------------------------------------------------------------------------------------
# A small synthetic data folder (no real data needed)
# --------------------------------------------------------------------------------------------
QA1_TRAIN = """\
1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Where is Daniel? \thallway\t4
1 Sandra travelled to the office.
2 Where is Sandra? \toffice\t1
1 John journeyed to the garden.
2 Mary went to the kitchen.
3 Where is Mary?\tkitchen\t2
"""
QA1_TEST = """\
1 Mary moved to the cellar.
2 Where is Mary? \tcellar\t1
"""
QA19_TRAIN = """\
1 The garden is west of the office.
2 The office is north of the hallway.
3 How do you go from the hallway to the garden?\tn,w\t2 1
"""
QA19_TEST = QA19_TRAIN


def _folder(tmp_path, files: dict[str, str]):
    root = tmp_path / "babi"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def small(tmp_path):
    return _folder(
        tmp_path,
        {
            "en-10k/qa1_single-supporting-fact_train.txt": QA1_TRAIN,
            "en-10k/qa1_single-supporting-fact_test.txt": QA1_TEST,
            "en-10k/qa19_path-finding_train.txt": QA19_TRAIN,
            "en-10k/qa19_path-finding_test.txt": QA19_TEST,
            "en/qa3_three-supporting-facts_train.txt": QA1_TRAIN,
            "en-10k/qa3_three-supporting-facts_test.txt": QA1_TEST,
        },
    )


def test_tokenize_keeps_punctuation_and_lowercases():
    assert tokenize("Where is Mary? ") == ["where", "is", "mary", "?"]
    assert tokenize("The office is north of the hallway.") == ["the", "office", "is", "north", "of", "the", "hallway", "."]
    assert tokenize("Is it?!  yes") == ["is", "it", "?!", "yes"]


def test_read_stories_splits_stories_and_counts_preceding_statements(small):
    stories = read_stories(small / "en-10k/qa1_single-supporting-fact_train.txt")
    assert len(stories) == 3
    assert [len(s.statements) for s in stories] == [3, 1, 2]
    assert [(q[1], q[2]) for q in stories[0].questions] == [("bathroom", 2), ("hallway", 3)]
    assert stories[0].questions[0][0] == ["where", "is", "mary", "?"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 Mary moved.\nbad line\n", r"qa1_x_train.txt:2: expected '<id> <text>'"),
        ("1 Mary moved.\n2 Where is Mary?\tkitchen\n", r":2: a question line needs question<TAB>answer<TAB>supporting ids"),
        ("2 Mary moved.\n", r":1: the first story must start at id 1"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "qa1_x_train.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_stories(path)


def test_examples_vocabulary_and_valid_carve(small):
    data = load_babi("1", "10k", data_dir=small, valid_fraction=0.34)
    # 3 stories → the last 1 is valid (int(0.34·3 + 0.5) = 1)
    assert len(data["train"]) == 3 and len(data["valid"]) == 1 and len(data["qa1"]) == 1
    assert data.file_counts == {"qa1:train": (3, 4), "qa1:test": (1, 1)}
    # vocabulary from the training examples only: "journeyed"/"kitchen" live only in the carved story
    assert "journeyed" not in data.vocab and "kitchen" not in data.vocab and data.vocab[PAD_ID] == "<pad>"
    assert data.vocab[1:] == sorted(data.vocab[1:])
    assert data.oov["valid"] == 4 and data.oov["qa1"] == 2  # journeyed, garden, kitchen ×2 ; cellar ×2
    assert data["valid"].answer.tolist() == [PAD_ID]  # an answer never seen in train cannot be right
    assert data.max_words == 7  # "daniel went back to the hallway ." (over all files)
    batch = data["train"].batch()
    assert batch["stories"].shape == (3, 3, 7) and batch["lengths"].tolist() == [2, 3, 1]
    assert data.decode(batch["stories"][1].flatten()) == ("mary moved to the bathroom . john went to the hallway . daniel went back to the hallway .")
    assert data.decode(batch["question"][1]) == "where is daniel ?" and data.vocab[batch["answer"][1]] == "hallway"
    assert torch.all(batch["stories"][0, 2] == PAD_ID) and torch.all(batch["stories"][2, 1:] == PAD_ID)
    assert batch["task"].tolist() == [1, 1, 1]
    assert data["train"].stories(pad_to=5).shape == (3, 5, 7)
    with pytest.raises(ValueError, match="shorter than the longest story"):
        data["train"].batch(pad_to=2)
    assert "valid" not in load_babi("1", "10k", data_dir=small, valid_fraction=0).splits


def test_window_keeps_the_latest_statements(small):
    data = load_babi("1", "10k", data_dir=small, valid_fraction=0, max_story=2)
    batch = data["train"].batch()
    assert batch["lengths"].tolist() == [2, 2, 1, 2]
    assert data.decode(batch["stories"][1].flatten()) == "john went to the hallway . daniel went back to the hallway ."
    assert data.truncated["train"] == 1 and data.windows == {1: 2}
    assert story_window(3, None) == 130 and story_window(1, None) == 70 and story_window(3, 5) == 5


def test_tasks_share_one_vocabulary_and_list_answers_are_one_symbol(small):
    data = load_babi("1,19", "10k", data_dir=small, valid_fraction=0)
    assert data.test_splits == ["qa1", "qa19"]
    assert "n,w" in data.vocab and "," not in data.vocab
    qa19 = data["qa19"].batch()
    assert data.vocab[qa19["answer"][0]] == "n,w" and qa19["task"].tolist() == [19]
    assert len(data["train"].only_task(19)) == 1 and len(data["train"].only_task(1)) == 4
    assert data.max_words == 11  # "how do you go from the hallway to the garden ?"


def test_missing_10k_train_fails_naming_the_file_unless_the_1k_fallback_is_asked(small):
    with pytest.raises(DataError, match=r"qa3 10k train: no file .*en-10k/qa3_\*_train.txt.*fallback_1k=True"):
        load_babi("3", "10k", data_dir=small)
    data = load_babi("1,3", "10k", data_dir=small, fallback_1k=True, valid_fraction=0)
    assert set(data.fallbacks) == {3} and data.fallbacks[3].endswith("en/qa3_three-supporting-facts_train.txt")
    assert data.files["qa3:train"] == data.fallbacks[3] and data.windows == {1: 70, 3: 130}
    with pytest.raises(DataError, match=r"qa2 train \(10k\): no file"):
        load_babi("2", "10k", data_dir=small, fallback_1k=True)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tasks": "0-3"}, "outside 1..20"),
        ({"tasks": "1-x"}, "cannot read"),
        ({"size": "100k"}, "choose one of 10k, 1k"),
        ({"valid_fraction": 1.0}, r"must be in \[0, 1\)"),
        ({"max_story": 0}, "max_story=0"),
    ],
)
def test_bad_options_are_task_errors(small, kwargs, message):
    with pytest.raises(TaskError, match=message):
        load_babi(data_dir=small, **kwargs)


def test_parse_tasks():
    assert parse_tasks("1-20") == tuple(range(1, 21))
    assert parse_tasks("3, 1-2") == (1, 2, 3) and parse_tasks(7) == (7,) and parse_tasks([2, 1]) == (1, 2)


def test_missing_folder_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="bAbI"):
        load_babi("1", data_dir=tmp_path / "nowhere")


def test_cache_reloads_the_same_tensors(small, tmp_path):
    first = load_babi("1,19", "10k", data_dir=small, cache_dir=tmp_path / "cache", valid_fraction=0.34)
    assert len(list((tmp_path / "cache").glob("babi-10k-1-19-*.pt"))) == 1
    again = load_babi("1,19", "10k", data_dir=small, cache_dir=tmp_path / "cache", valid_fraction=0.34)
    assert again.vocab == first.vocab and again.file_counts == first.file_counts and again.oov == first.oov
    for split, part in first.splits.items():
        for key, value in part.to_dict().items():
            assert torch.equal(getattr(again[split], key), value), (split, key)
    other = load_babi("1,19", "10k", data_dir=small, cache_dir=tmp_path / "cache", valid_fraction=0)
    assert "valid" not in other.splits  # options are part of the cache key
    assert isinstance(again["train"], BabiSplit)


# --------------------------------------------------------------------------------------------
# The real files
# --------------------------------------------------------------------------------------------
@pytest.mark.realdata
def test_real_1k_counts_and_task1_sizes(data_root):
    data = load_babi("1-20", "1k", data_dir=data_root / "babi", valid_fraction=0.1)
    for task, (train_stories, _, test_stories) in STORIES.items():
        assert data.file_counts[f"qa{task}:train"] == (train_stories, 1000), task
        assert data.file_counts[f"qa{task}:test"] == (test_stories, 1000), task
        assert len(data[f"qa{task}"]) == 1000
        carved = read_stories(data.files[f"qa{task}:train"])[-int(0.1 * train_stories + 0.5) :]
        assert len(data["valid"].only_task(task)) == sum(len(s.questions) for s in carved) > 0
        assert len(data["train"].only_task(task)) == 1000 - len(data["valid"].only_task(task))
    assert data.max_words == 12 and data.oov["train"] == 0 and data.oov["qa8"] == 1  # football,apple,milk
    one = load_babi("1", "1k", data_dir=data_root / "babi")
    assert one.vocab_size == 22 and one.max_words == 7  # task 1: V=22 incl. PAD, L=7 (the paper's 7,943 parameters)


@pytest.mark.slow
@pytest.mark.realdata
def test_real_10k_counts_and_the_missing_qa3(data_root):
    with pytest.raises(DataError, match="qa3 10k train"):
        load_babi("3", "10k", data_dir=data_root / "babi")
    data = load_babi("1-20", "10k", data_dir=data_root / "babi", valid_fraction=0.1, fallback_1k=True)
    assert set(data.fallbacks) == {3}
    for task, (train_1k, train_10k, test_stories) in STORIES.items():
        expected_train = (train_1k, 1000) if task == 3 else (train_10k, 10000)
        assert data.file_counts[f"qa{task}:train"] == expected_train, task
        assert data.file_counts[f"qa{task}:test"] == (test_stories, 1000), task
        assert len(data["train"].only_task(task)) + len(data["valid"].only_task(task)) == expected_train[1]
    assert data.oov == {split: 0 for split in data.splits}
    assert data["train"].max_length == 130 and data["qa2"].max_length == 70  # the windows
