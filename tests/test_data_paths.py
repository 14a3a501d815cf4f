"""A data path is checked against the files its task reads before any data work: a
folder with none of them is one error naming the files and, when a sub-folder has them, that
folder (`did you mean …?`). Torch-free helpers of tasks/paths.py, and each file-reading task."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.errors import DataError
from tasks.paths import corpus_folder, dataset_dir, expect_files, meant_folder


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x\n")
    return path


def test_a_folder_with_the_files_is_taken(tmp_path: Path) -> None:
    _touch(tmp_path / "d" / "validate.txt")
    assert expect_files("logic data", tmp_path / "d", ("train.txt", "validate.txt"), "how") == tmp_path / "d"


def test_the_parent_names_the_sub_folder_that_has_them(tmp_path: Path) -> None:
    _touch(tmp_path / "root" / "a-other" / "notes.md")
    _touch(tmp_path / "root" / "logical_entailment" / "validate.txt")
    with pytest.raises(DataError) as err:
        expect_files("logic data", tmp_path / "root", ("train.txt", "validate.txt"), "generate one")
    assert str(err.value) == (
        f"logic data: {tmp_path / 'root'} has none of the files the task reads (train.txt, "
        f"validate.txt); did you mean {tmp_path / 'root' / 'logical_entailment'}?"
    )


def test_two_levels_down_and_hidden_folders_skipped(tmp_path: Path) -> None:
    _touch(tmp_path / ".cache" / "validate.txt")
    _touch(tmp_path / "shared" / "data" / "logical_entailment" / "validate.txt")
    assert meant_folder(tmp_path, ("validate.txt",)) is None  # three levels down: not searched
    assert meant_folder(tmp_path / "shared", ("validate.txt",)) == tmp_path / "shared" / "data" / "logical_entailment"
    with pytest.raises(DataError, match=r"has none of the files the task reads \(validate.txt\); generate one$"):
        expect_files("logic data", tmp_path, ("validate.txt",), "generate one")
    with pytest.raises(DataError, match="directory .*missing not found; generate one"):
        expect_files("logic data", tmp_path / "missing", ("validate.txt",), "generate one")


def test_patterns_with_folders(tmp_path: Path) -> None:
    _touch(tmp_path / "babi" / "en" / "qa1_single-supporting-fact_train.txt")
    with pytest.raises(DataError, match=rf"did you mean {tmp_path / 'babi'}\?"):
        expect_files("bAbI", tmp_path, ("en/qa*_*_train.txt", "en-10k/qa*_*_train.txt"), "how")


def test_corpus_folder_checks_the_corpus_files(tmp_path: Path) -> None:
    _touch(tmp_path / "ptb" / "ptb.train.txt")
    assert corpus_folder(str(tmp_path / "ptb"), "lm", "WikiText/PTB", "x", ("ptb.train.txt",)) == tmp_path / "ptb"
    with pytest.raises(DataError, match=rf"^lm data: {tmp_path} has none .*did you mean {tmp_path / 'ptb'}\?$"):
        corpus_folder(str(tmp_path), "lm", "WikiText/PTB", "x", ("ptb.train.txt", "train.txt"))
    assert corpus_folder(None, "lm", "WikiText/PTB", "x", ("ptb.train.txt",)) is None


def test_a_data_root_one_level_too_high_is_named(tmp_path: Path) -> None:
    (tmp_path / "shared" / "data" / "snli").mkdir(parents=True)
    with pytest.raises(DataError, match=rf"did you mean {tmp_path / 'shared' / 'data'} as the data root\?"):
        dataset_dir("snli", None, ("snli",), "how", root=tmp_path / "shared")


@pytest.mark.parametrize(
    "task, options, want",
    [
        ("logic", {}, "logical_entailment"),
        ("babi", {}, "babi"),
        ("lm", {"corpus": "ptb"}, "ptb"),
        ("lm", {}, "wikitext2"),
        ("autoencode", {}, "ptb"),
    ],
)
def test_each_file_reading_task_names_its_folder(task: str, options: dict, want: str, tmp_path: Path) -> None:
    from tasks.registry import get_task

    root = tmp_path / "data"
    _touch(root / "logical_entailment" / "validate.txt")
    _touch(root / "babi" / "en" / "qa1_single-supporting-fact_train.txt")
    _touch(root / "ptb" / "ptb.train.txt")
    _touch(root / "wikitext2" / "wiki.train.tokens")
    with pytest.raises(DataError, match=rf"did you mean {root / want}\?$"):
        get_task(task)(options, str(root), tmp_path / "cache").check_data()
    get_task(task)(options, str(root / want), tmp_path / "cache").check_data()  # the right folder passes
