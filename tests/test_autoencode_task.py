"""The autoencode task: sentence → LSTM encoder → plan → decoder unit regenerates it.

TPGN's unit checks at the task level: free (greedy) generation is the teacher-forced model run on
its own output, step by step; an untrained model's perplexity is on the order of the vocabulary;
padding changes neither losses nor generations. Plus conditioning (initial_carry vs first input),
the trainer end to end, tpgn in the lm task, and user errors."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tasks.autoencode.adapter import SentenceAutoencoder
from tasks.autoencode.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, collate
from tasks.errors import DataError, TaskError
from tasks.registry import get_task
from tasks.training import TrainConfig, train

DECODERS = ["tpgn", "lstm", "gru", "tpru[roles=8]"]
WORDS = [f"w{i}" for i in range(200)]


@pytest.fixture(scope="module")
def ptb_root(tmp_path_factory):
    """PTB layout, random sentences of 2..9 words over 200 words (and one of 40: dropped)."""
    root = tmp_path_factory.mktemp("ptb")
    rng = random.Random(0)
    for split, n in (("train", 300), ("valid", 40), ("test", 40)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(n)]
        lines.append(" ".join(["w1"] * 40))
        (root / f"ptb.{split}.txt").write_text("".join(f" {line} \n" for line in lines))
    return root


def _task(root, tmp_path, **options):
    task = get_task("autoencode")({"corpus": "ptb", **options}, str(root), tmp_path)
    task.prepare()
    return task


def _model(task, unit, dim=9, input_dim=6, seed=0):
    torch.manual_seed(seed)
    model = task.build_model(unit, "seq2seq", dim, input_dim, task.resolve_hparams({}))
    return model.double().eval()


def _tokens(n_max=6, batch=5, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, n_max + 1, (batch,), generator=g)
    return [torch.randint(4, vocab, (int(n),), generator=g) for n in lengths]


def test_data_subsets_and_description(ptb_root, tmp_path):
    task = _task(ptb_root, tmp_path, max_train_sentences=100, max_eval_sentences=10, max_len=30)
    d = task.describe()
    assert (d["train_sentences"], d["valid_sentences"], d["test_sentences"]) == (100, 10, 10)
    assert d["train_dropped"] == 1  # the 40-word line
    assert task.sentences["train"][3].tolist() == task.corpus["train"][3].tolist()  # the FIRST n sentences
    batches = list(task.train_batches(32, torch.Generator().manual_seed(0), 0))
    assert sum(b["enc_input"].shape[0] for b in batches) == 100 and len(batches) == 4


def test_max_vocab_keeps_the_most_frequent_words(ptb_root, tmp_path):
    full = _task(ptb_root, tmp_path)
    cut = _task(ptb_root, tmp_path, max_vocab=20)
    assert cut.corpus.vocab == full.corpus.vocab[:20] and cut.corpus.vocab_size == 20
    for split in ("train", "valid", "test"):
        ids, orig = cut.corpus[split].ids, full.corpus[split].ids
        assert torch.equal(ids, torch.where(orig >= 20, torch.full_like(orig, UNK_ID), orig))
        assert cut.n_unk_added[split] == int((orig >= 20).sum()) > 0
    assert cut.describe()["train_unk_added"] == cut.n_unk_added["train"]


@pytest.mark.parametrize(
    "unit,conditioning", [("tpgn", "initial_carry"), ("lstm", "first_input"), ("gru", "first_input"), ("tpru[roles=8]", "first_input")]
)
def test_conditioning(ptb_root, tmp_path, unit, conditioning):
    task = _task(ptb_root, tmp_path, encoder_dim=7)
    model = _model(task, unit)
    assert model.conditioning == conditioning
    if conditioning == "initial_carry":
        assert model.decoder.plan_size == 7 and model.plan_input is None  # the task sets plan_size
    else:
        assert model.plan_input.in_features == 7 and model.plan_input.out_features == 6
    # the plan matters: two different sentences give different decoder outputs for the same decoder input
    a, b = collate(_tokens(seed=1)[:1]), collate(_tokens(seed=2)[:1])
    dec = torch.tensor([[BOS_ID, 5, 6]])
    la = model(a.enc_input, a.enc_mask, dec)
    lb = model(b.enc_input, b.enc_mask, dec)
    assert not torch.allclose(la, lb)


@pytest.mark.parametrize("unit", [*DECODERS, "tpgn[layers=2]"])
def test_free_generation_is_the_teacher_forced_model_on_its_own_output(ptb_root, tmp_path, unit):
    """§4.5 (d), every step: feeding the greedy output back teacher-forced gives the same argmaxes
    (and the first step's distribution does not depend on what follows)."""
    task = _task(ptb_root, tmp_path)
    model = _model(task, unit, seed=3)
    batch = collate(_tokens())
    ids = model.generate(batch.enc_input, batch.enc_mask, max_steps=8)
    dec_input = torch.cat([torch.full((ids.shape[0], 1), BOS_ID), ids[:, :-1]], 1)
    logits = model(batch.enc_input, batch.enc_mask, dec_input)
    first = model(batch.enc_input, batch.enc_mask, torch.full((ids.shape[0], 1), BOS_ID))
    torch.testing.assert_close(first[:, 0], logits[:, 0], rtol=1e-12, atol=1e-12)
    logits[..., PAD_ID] = logits[..., BOS_ID] = -math.inf
    assert torch.equal(logits.argmax(-1), ids)


@pytest.mark.parametrize("unit", DECODERS)
def test_padding_changes_neither_losses_nor_generations(ptb_root, tmp_path, unit):
    """§4.5 (f): a sentence alone and inside a padded batch of longer ones."""
    task = _task(ptb_root, tmp_path)
    model = _model(task, unit, seed=4)
    sentences = _tokens(n_max=9, batch=6, seed=5)
    batch = collate(sentences)
    logits = model(batch.enc_input, batch.enc_mask, batch.dec_input)
    ids = model.generate(batch.enc_input, batch.enc_mask, max_steps=6)
    for i, s in enumerate(sentences):
        one = collate([s])
        alone = model(one.enc_input, one.enc_mask, one.dec_input)
        n = s.numel() + 1
        torch.testing.assert_close(logits[i, :n], alone[0], rtol=1e-10, atol=1e-10)
        assert torch.equal(model.generate(one.enc_input, one.enc_mask, max_steps=6)[0], ids[i, : ids.shape[1]][:6])


@pytest.mark.parametrize("unit", DECODERS)
def test_untrained_perplexity_is_on_the_order_of_the_vocabulary(ptb_root, tmp_path, unit):
    """§4.5 (e): at initialisation the model is close to uniform over the vocabulary."""
    task = _task(ptb_root, tmp_path, bleu=False)
    model = _model(task, unit).float()
    ppl = task.evaluate(model, "valid", 16)["ppl"]
    V = task.corpus.vocab_size
    assert V / 2 < ppl < 2 * V, (ppl, V)


def test_bleu_of_a_perfect_and_of_an_empty_reconstruction(ptb_root, tmp_path, monkeypatch):
    task = _task(ptb_root, tmp_path, max_eval_sentences=12)
    model = _model(task, "gru")

    def copy(enc_input, enc_mask, max_steps):  # a decoder that returns the sentence and <eos>
        return torch.cat([enc_input.masked_fill(~enc_mask, PAD_ID), torch.full((enc_input.shape[0], 1), PAD_ID)], 1).scatter(
            1, enc_mask.sum(1, keepdim=True), EOS_ID
        )

    monkeypatch.setattr(model, "generate", copy)
    assert task.bleu(model, "valid") == pytest.approx({"bleu1": 1.0, "bleu2": 1.0, "bleu3": 1.0, "bleu4": 1.0})
    monkeypatch.setattr(model, "generate", lambda e, m, n: torch.full((e.shape[0], 1), EOS_ID))
    assert task.bleu(model, "valid") == {"bleu1": 0.0, "bleu2": 0.0, "bleu3": 0.0, "bleu4": 0.0}


@pytest.mark.parametrize("unit", ["tpgn", "lstm"])
def test_trains_end_to_end_and_logs_bleu(ptb_root, tmp_path, unit):
    task = _task(ptb_root, tmp_path, max_eval_sentences=20, encoder_dim=16)
    result = train(task, TrainConfig(unit, "seq2seq", 16, 8, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 16}))
    assert result.status == "finished", result.reason
    first, last = result.history[0], result.history[-1]
    assert last["train_ppl"] < first["train_ppl"]
    for n in (1, 2, 3, 4):
        assert 0.0 <= last[f"valid_bleu{n}"] <= 1.0
        assert 0.0 <= result.test["test"][f"bleu{n}"] <= 1.0
    assert result.params_formula is not None and result.params_total > result.params_formula  # decoder only


def test_readout_full_is_the_papers_lexical_layer(ptb_root, tmp_path):
    task = _task(ptb_root, tmp_path, readout="full")
    model = _model(task, "tpgn")
    assert isinstance(model.project, torch.nn.Identity)
    assert model.out.weight.shape == (task.corpus.vocab_size, 9) and model.out.weight is not model.embed.weight
    tied = _model(_task(ptb_root, tmp_path), "tpgn")
    assert tied.out.weight is tied.embed.weight and tied.project.weight.shape == (6, 9)


def test_decoder_parameter_count_is_the_units(ptb_root, tmp_path):
    """The harness logs the decoder's counts: the encoder (nn.LSTM) and the readout are not units."""
    import units

    task = _task(ptb_root, tmp_path, encoder_dim=7)
    for unit in DECODERS:
        counts = units.model_param_counts(_model(task, unit))
        spec = units.resolve(unit, 9).spec
        if unit == "tpgn":
            spec = spec.with_options(plan_size=7)
        assert counts == units.param_counts(str(spec), 6, 9)


def test_user_errors(ptb_root, tmp_path):
    task = _task(ptb_root, tmp_path, encoder_dim=7)
    hp = task.resolve_hparams({})
    with pytest.raises(TaskError, match="plan_size=5 but the plan vector has 7"):
        task.build_model("tpgn[plan_size=5]", "seq2seq", 9, 6, hp)
    with pytest.raises(TaskError, match="bidirectional"):
        task.build_model("gru[bidirectional=true]", "seq2seq", 9, 6, hp)
    with pytest.raises(TaskError, match="no architecture 'lm'"):
        task.build_model("gru", "lm", 9, 6, hp)
    with pytest.raises(TaskError, match="unknown option 'max_length'"):
        get_task("autoencode")({"max_length": 3}, str(ptb_root), tmp_path)
    with pytest.raises(DataError, match="not found"):
        get_task("autoencode")({}, str(tmp_path / "nowhere"), tmp_path).prepare()
    with pytest.raises(DataError, match="no generated corpus"):
        get_task("autoencode")({}, "generated", tmp_path).prepare()


def test_model_is_usable_without_the_task():
    model = SentenceAutoencoder("tpgn", vocab_size=30, dim=4, input_dim=3, encoder_dim=5, dropout=0.0)
    batch = collate(_tokens(vocab=30))
    assert model(batch.enc_input, batch.enc_mask, batch.dec_input).shape == (*batch.dec_input.shape, 30)


# -- tpgn as a drop-in for the lm task ---------------------------------------------------------


def test_tpgn_in_the_lm_task(ptb_root, tmp_path):
    """Two stacked tpgn layers (the lm default), state carried across BPTT windows."""
    task = get_task("lm")({"corpus": "ptb", "bptt": 8}, str(ptb_root), tmp_path)
    result = train(task, TrainConfig("tpgn", "lm", 16, 8, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 8}))
    assert result.status == "finished", result.reason
    assert result.history[-1]["train_ppl"] < result.history[0]["train_ppl"]
    model = task.build_model("tpgn", "lm", 16, 8, task.resolve_hparams({}))
    assert [type(layer).__name__ for layer in model.encoder.layers] == ["TPGN", "TPGN"]
    import units

    formula = units.lookup("tpgn").formula_params
    assert result.params_formula == formula(8, 16) + formula(16, 16)  # layer 1 reads the embedding, layer 2 f_t


def test_the_cpu_study_compares_decoders_at_matched_weights(monkeypatch, tmp_path):
    """studies/tpgn-cpu.toml: every unit at the hidden size whose weights match tpgn's within 1%."""
    from pathlib import Path

    import units
    from harness.study.cells import expand
    from harness.study.load import load_study

    monkeypatch.setenv("TPRBENCH_DATA", str(tmp_path))
    cells = expand(load_study(Path(__file__).parent.parent / "studies" / "tpgn-cpu.toml"))
    assert {c.task for c in cells} == {"autoencode", "lm"}
    for task in ("autoencode", "lm"):
        counts = {units.parse_spec(c.unit).name: units.param_counts(c.unit, c.input_dim, c.dim).formula for c in cells if c.task == task}
        assert set(counts) == {"tpgn", "lstm", "gru", "tpru"}
        for name, n in counts.items():
            assert abs(n / counts["tpgn"] - 1) < 0.01, (task, name, n, counts["tpgn"])
