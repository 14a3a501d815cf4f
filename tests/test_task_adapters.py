"""NLI and LM adapters end to end on tiny fixture data in the real layouts (fast), and on the
real data when TPRBENCH_DATA is set."""

from __future__ import annotations

import random

import pytest

from tasks.errors import TaskError
from tasks.registry import available_tasks, get_task
from tasks.training import TrainConfig, train

WORDS = "the a cat dog man woman sits runs sleeps eats park food red blue big small not".split()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + " ."


@pytest.fixture(scope="module")
def nli_root(tmp_path_factory):
    """A data root with SNLI in SentEval's layout and MNLI's dev CSVs; the label is a word rule."""
    root = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    labels = ("entailment", "neutral", "contradiction")

    def pair():
        p, h = _sentence(rng), _sentence(rng)
        y = 2 if "not" in h.split() else (0 if h.split()[1] in p.split() else 1)
        return p, h, labels[y]

    snli = root / "senteval" / "SNLI"
    snli.mkdir(parents=True)
    for split, n in (("dev", 120), ("test", 600)):
        rows = [pair() for _ in range(n)]
        (snli / f"s1.{split}").write_text("".join(p + "\n" for p, _, _ in rows))
        (snli / f"s2.{split}").write_text("".join(h + "\n" for _, h, _ in rows))
        (snli / f"labels.{split}").write_text("".join(y + "\n" for _, _, y in rows))
    mnli = root / "mnli"
    mnli.mkdir()
    for name in ("dev_matched", "dev_mismatched"):
        rows = [pair() for _ in range(100)] + [("x y .", "y x .", "-")]
        body = "".join(f"{i},{p},{h},{y}\n" for i, (p, h, y) in enumerate(rows))
        (mnli / f"{name}.csv").write_text("pairID,sentence1,sentence2,label\n" + body)
    return root


@pytest.fixture(scope="module")
def lm_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptb")
    rng = random.Random(1)
    for split, n in (("train", 400), ("valid", 60), ("test", 60)):
        (root / f"ptb.{split}.txt").write_text("".join(f" {_sentence(rng)} \n" for _ in range(n)))
    return root


def test_registered_tasks():
    assert {"logic", "nli", "lm"} <= set(available_tasks())
    with pytest.raises(TaskError, match="did you mean 'nli'"):
        get_task("nil")


@pytest.mark.parametrize("arch", ["plain", "bidaf"])
def test_nli_trains_and_tests_on_other_corpora(nli_root, tmp_path, arch):
    task = get_task("nli")({"max_len": 12}, str(nli_root), tmp_path)
    task.prepare()
    facts = task.describe()
    assert facts["train_pairs"] == 600 and facts["train_splits"] == ["snli:test"] and facts["mnli_dev_matched_pairs"] == 100
    assert facts["dropped_gold_dash"] == {"mnli:dev_matched": 1, "mnli:dev_mismatched": 1}
    result = train(task, TrainConfig("gru", arch, 16, 16, epochs=3, seed=0, hparams={"lr": 1e-2, "batch_size": 32}))
    assert result.status == "finished"
    assert set(result.test) == {"mnli_dev_matched", "mnli_dev_mismatched"}
    assert result.best_valid > 0.45  # 3 balanced-ish classes; the word rule is learnable


def test_nli_trains_on_several_splits_and_selects_by_the_mean_of_several(nli_root, tmp_path):
    """The papers: train on MNLI + SNLI (concatenated), best epoch by the mean of MNLI dev matched
    and mismatched accuracy: `valid_acc` (what the loop's best-epoch rule reads) is that mean."""
    opts = {"train": ["snli:test", "snli:dev"], "valid": ["mnli:dev_matched", "mnli:dev_mismatched"], "test": ["snli:dev"]}
    task = get_task("nli")(opts, str(nli_root), tmp_path)
    task.prepare()
    facts = task.describe()
    assert facts["train_pairs"] == 600 + 120 and facts["train_splits"] == ["snli:test", "snli:dev"]
    assert task.valid_split == "mean(mnli_dev_matched,mnli_dev_mismatched)"
    result = train(task, TrainConfig("gru", "plain", 16, 16, epochs=3, seed=0, hparams={"lr": 1e-2, "batch_size": 32}))
    assert result.status == "finished" and result.metric == "valid_acc"
    for row in result.history:
        mean = (row["valid_acc_mnli_dev_matched"] + row["valid_acc_mnli_dev_mismatched"]) / 2
        assert row["valid_acc"] == pytest.approx(mean, abs=1e-12)
    best = max(range(len(result.history)), key=lambda i: result.history[i]["valid_acc"])
    assert result.best_valid == result.history[best]["valid_acc"]
    # one split may still be written as a string; the NLI schedule is the papers' constant lr
    single = get_task("nli")({"train": "snli:test", "valid": "snli:dev"}, str(nli_root), tmp_path)
    assert single.options.train == ["snli:test"] and single.valid_split == "snli_dev"
    assert single.defaults["lr"] == 1e-4 and single.defaults["schedule"] == "none"
    with pytest.raises(TaskError, match="named twice"):
        get_task("nli")({"train": ["snli:test", "snli:test"]}, str(nli_root), tmp_path)


def test_nli_rejects_mixed_label_sets(nli_root, tmp_path):
    task = get_task("nli")({"test": ["qnli:dev"]}, str(nli_root), tmp_path)
    with pytest.raises(TaskError, match="mix 2-way"):
        task.prepare()


def test_nli_options_are_checked(tmp_path):
    with pytest.raises(TaskError, match="source:split"):
        get_task("nli")({"train": "multinli"}, None, tmp_path)


@pytest.mark.parametrize("unit", ["lstm", "tpru[roles=8]", "gru[layers=1]"])
def test_lm_trains_with_tied_embeddings_and_carried_state(lm_root, tmp_path, unit):
    task = get_task("lm")({"corpus": "ptb", "bptt": 10}, str(lm_root), tmp_path)
    result = train(task, TrainConfig(unit, "lm", 16, 16, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 8}))
    assert result.status == "finished"
    vocab = task.corpus.vocab_size
    # Random sentences over 17 words: a model does a bit better than uniform over the vocabulary.
    assert result.history[-1]["train_ppl"] < min(result.history[0]["train_ppl"], vocab)
    assert result.test["test"]["ppl"] < vocab
    model = task.build_model(unit, "lm", 16, 16, task.resolve_hparams({}))
    assert model.decoder.weight is model.embed.weight
    expected_layers = 1 if "layers=1" in unit else 2
    assert len(getattr(model.encoder, "layers", [model.encoder])) == expected_layers


def test_lm_projection_before_tied_decoder_as_the_authors_lm(lm_root, tmp_path):
    """models/lm.py: proj = Linear(d, d_embed), orthogonal weight, bias 0, always there (even at d = d_embed);
    embedding orthogonal. `projection=false` drops it (d = d_embed only)."""
    import torch

    task = get_task("lm")({"corpus": "ptb"}, str(lm_root), tmp_path)
    task.prepare()
    for dim, input_dim in ((16, 16), (24, 16)):
        model = task.build_model("gru", "lm", dim, input_dim, task.resolve_hparams({}))
        assert isinstance(model.project, torch.nn.Linear)
        W = model.project.weight.detach()
        assert W.shape == (input_dim, dim)
        torch.testing.assert_close(W @ W.T, torch.eye(input_dim), atol=1e-5, rtol=0)  # orthonormal rows
        assert torch.all(model.project.bias == 0)
        E = model.embed.weight.detach()  # [vocab, d_embed], vocab > d_embed: orthonormal columns
        torch.testing.assert_close(E.T @ E, torch.eye(input_dim), atol=1e-5, rtol=0)
    off = get_task("lm")({"corpus": "ptb", "projection": False}, str(lm_root), tmp_path)
    off.prepare()
    assert isinstance(off.build_model("gru", "lm", 16, 16, off.resolve_hparams({})).project, torch.nn.Identity)
    with pytest.raises(TaskError, match="projection=false"):
        off.build_model("gru", "lm", 24, 16, off.resolve_hparams({}))


def test_lm_refuses_bidirectional_units(lm_root, tmp_path):
    task = get_task("lm")({"corpus": "ptb"}, str(lm_root), tmp_path)
    task.prepare()
    with pytest.raises(TaskError, match="bidirectional"):
        task.build_model("lstm[bidirectional=true]", "lm", 8, 8, task.resolve_hparams({}))


@pytest.mark.realdata
def test_nli_real_counts(data_root, tmp_path):
    task = get_task("nli")({"max_train": 200}, str(data_root), tmp_path)
    facts = task.describe()
    assert facts["snli_dev_pairs"] == 9842
    assert facts["mnli_dev_matched_pairs"] == 9815 and facts["mnli_dev_mismatched_pairs"] == 9832
    assert facts["dropped_gold_dash"] == {"mnli:dev_matched": 185, "mnli:dev_mismatched": 168}


@pytest.mark.realdata
def test_nli_max_eval_keeps_the_first_pairs_of_each_eval_split(data_root, tmp_path):
    task = get_task("nli")({"max_train": 50, "max_eval": 30}, str(data_root), tmp_path)
    facts = task.describe()
    assert (facts["train_pairs"], facts["snli_dev_pairs"], facts["mnli_dev_matched_pairs"]) == (50, 30, 30)


@pytest.mark.realdata
def test_lm_real_wikitext2_counts(data_root, tmp_path):
    task = get_task("lm")({"corpus": "wikitext2"}, str(data_root / "wikitext2"), tmp_path)
    facts = task.describe()
    assert facts["train_tokens"] == 2088628 and facts["vocab"] == 33278


def test_transfer_task_adds_senteval_splits(nli_root, tmp_path):
    """NLI training, then SentEval's MR protocol (k-fold) on the frozen encoder, as test splits."""
    mr = nli_root / "senteval" / "MR"
    mr.mkdir(parents=True, exist_ok=True)
    rng = random.Random(3)
    (mr / "rt-polarity.pos").write_text("".join(f"red big {_sentence(rng)}\n" for _ in range(60)))
    (mr / "rt-polarity.neg").write_text("".join(f"not small {_sentence(rng)}\n" for _ in range(60)))
    task = get_task("transfer")({"max_len": 12, "senteval_tasks": ["MR"], "kfold": 3}, str(nli_root), tmp_path)
    result = train(task, TrainConfig("gru", "plain", 16, 16, epochs=1, seed=0, hparams={"lr": 1e-2, "batch_size": 32}))
    assert result.status == "finished"
    assert set(result.test) == {"mnli_dev_matched", "mnli_dev_mismatched", "senteval_MR"}
    assert result.test["senteval_MR"]["acc"] > 0.7  # the class words are in every sentence


def test_senteval_words_outside_the_training_vocabulary_get_the_runs_vectors(nli_root, tmp_path, monkeypatch):
    """InferSent's way: SentEval sentences' unknown words get their pretrained vectors, not <unk>."""
    import numpy as np
    import torch

    from tasks.nli import data as nli_data

    rng = np.random.RandomState(0)
    vectors = {w: rng.randn(16).round(4) for w in WORDS + ["zebra", "quokka"]}
    path = tmp_path / "vectors.txt"
    path.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()))
    task = get_task("transfer")({"max_len": 12, "vectors": str(path), "senteval_tasks": ["MR"]}, str(nli_root), tmp_path)
    task.prepare()
    assert "zebra" not in task.vocab and "quokka" not in task.vocab
    torch.manual_seed(0)
    model = task.build_model("gru", "plain", 16, 16, task.resolve_hparams({}))
    before = task.encode_sentences(model, [["zebra", "sits"], ["quokka", "sits"]])
    np.testing.assert_array_equal(before[0], before[1])  # both <unk>
    assert task.expand_vocab([["zebra", "sits"], ["quokka"], ["unicornz"]]) == 2  # unicornz: not in the file
    after = task.encode_sentences(model, [["zebra", "sits"], ["quokka", "sits"], ["unicornz", "sits"]])
    assert not np.allclose(after[0], after[1])
    np.testing.assert_array_equal(after[2], before[0])  # still <unk>
    with torch.no_grad():  # by hand: the file's vector for zebra, the trained row for sits
        emb = torch.stack([torch.tensor(vectors["zebra"], dtype=torch.float32), model.embed.weight[task.vocab.stoi["sits"]]])
        out, state = model.encoder(emb.unsqueeze(0), torch.ones(1, 2, dtype=torch.bool))
        expected = out.max(1).values[0].double().numpy()
    np.testing.assert_allclose(after[0], expected, rtol=1e-6, atol=1e-7)
    assert task.expand_vocab([["zebra"], ["unicornz"]]) == 0  # nothing new: the file is not read again
    # the transfer task reads the vector file once for all of its SentEval tasks
    mr = tmp_path / "senteval" / "MR"
    mr.mkdir(parents=True)
    (mr / "rt-polarity.pos").write_text("a red zebra .\n")
    (mr / "rt-polarity.neg").write_text("a blue quokka .\n")
    calls = []
    real = nli_data.vectors_for_words
    monkeypatch.setattr(nli_data, "vectors_for_words", lambda *a, **k: calls.append(a) or real(*a, **k))
    fresh = get_task("transfer")(
        {"max_len": 12, "vectors": str(path), "senteval_tasks": ["MR"], "senteval_path": str(tmp_path / "senteval")}, str(nli_root), tmp_path
    )
    assert fresh.expand_for_senteval() == 2 and fresh.expand_for_senteval() == 2 and len(calls) == 1


def test_transfer_options_name_unknown_senteval_tasks(tmp_path):
    with pytest.raises(TaskError, match="unknown SentEval task"):
        get_task("transfer")({"senteval_tasks": ["MRR"]}, None, tmp_path)
