"""The `lm` task's HRR options and its per-sentence mode on a tiny PTB-layout corpus.

The HRR module itself (equations, α schedule, counts, frozen bases) is tested in tests/test_hrr.py and
the binding identities in tests/test_binding.py; here: the options reach the module, it
wraps any unit, the isometry loss reaches the trainer with lingvo's weighting, the sentence mode
predicts exactly the tokens of the stream and resets the state, and bad options are one clear error."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tasks.errors import TaskError
from tasks.lm.data import sentence_batches, split_sentences
from tasks.lm.hrr import HRRWordEmbedding
from tasks.lm.meta import HRR_ANNEAL_CONTIGUOUS, HRR_ANNEAL_SENTENCES
from tasks.registry import get_task
from tasks.training import TrainConfig, train

WORDS = "the a cat dog man woman sits runs sleeps eats park food red blue big small not".split()


@pytest.fixture(scope="module")
def lm_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptb")
    rng = random.Random(2)
    for split, n in (("train", 300), ("valid", 40), ("test", 40)):
        lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + " ." for _ in range(n))
        (root / f"ptb.{split}.txt").write_text("".join(f" {line} \n" for line in lines))
    return root


def _task(lm_root, tmp_path, **options):
    return get_task("lm")({"corpus": "ptb", **options}, str(lm_root), tmp_path)


HRR = {"embedding": "hrr", "hrr_fillers": 4}


# -- options ------------------------------------------------------------------------------------


def test_hrr_options_reach_the_embedding(lm_root, tmp_path):
    task = _task(
        lm_root, tmp_path, **HRR, hrr_roles=2, hrr_basis="isometric", hrr_beta=7.0, hrr_anneal_steps=11, hrr_filler_dropout=0.25, projection=False
    )
    task.prepare()
    model = task.build_model("gru", "lm", 16, 16, task.resolve_hparams({}))
    emb = model.embed
    assert isinstance(emb, HRRWordEmbedding) and model.hrr is emb and not hasattr(model, "decoder")
    assert (emb.vocab_size, emb.dim, emb.fillers, emb.roles, emb.basis) == (task.corpus.vocab_size, 16, 4, 2, "isometric")
    assert emb.beta == 7.0 and emb.anneal_steps == (11,) and emb.filler_dropout.p == 0.25
    assert isinstance(model.project, torch.nn.Identity)


def test_default_annealing_is_the_authors_for_each_mode(lm_root, tmp_path):
    """lingvo ptb_word_level.py: HRRify's 15000 for the contiguous config, 3000 per sentence, [3000, 4000, 5000] for N = 4."""
    assert _task(lm_root, tmp_path, **HRR).options.hrr_anneal() == HRR_ANNEAL_CONTIGUOUS == 15000
    assert _task(lm_root, tmp_path, **HRR, contiguous=False).options.hrr_anneal() == HRR_ANNEAL_SENTENCES == 3000
    assert _task(lm_root, tmp_path, **HRR, hrr_roles=4).options.hrr_anneal() == [3000, 4000, 5000]
    assert _task(lm_root, tmp_path, **HRR, hrr_anneal_steps=0).options.hrr_anneal() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"embedding": "hrr"}, "needs hrr_fillers"),
        ({**HRR, "bpe_vocab_size": 500}, "word level only"),
        ({"hrr_fillers": 4}, "hrr_fillers: HRR options need embedding"),
        ({**HRR, "hrr_basis": "orthogonal"}, "hrr_basis"),
        ({**HRR, "hrr_roles": 4, "hrr_anneal_steps": 100}, "a list of 3"),
        ({**HRR, "hrr_roles": 3, "hrr_anneal_steps": [1, 2, 3]}, "need 2 step counts"),
        ({**HRR, "hrr_anneal_steps": -1}, ">= 0|greater than or equal to 0"),  # the field's bound (tasks/bounds.py) or ours
        ({**HRR, "hrr_filler_dropout": 1.0}, "hrr_filler_dropout"),
    ],
)
def test_bad_hrr_options_are_one_clear_error(tmp_path, options, message):
    with pytest.raises(TaskError, match=message) as err:
        get_task("lm")({"corpus": "ptb", **options}, None, tmp_path)
    assert "\n" not in str(err.value)


def test_resolved_options_validate_again(tmp_path):
    """The harness stores the options with every default filled in and validates them again."""
    for options in ({}, HRR, {**HRR, "hrr_basis": "isometric", "contiguous": False}):
        task = get_task("lm")({"corpus": "ptb", **options}, None, tmp_path)
        again = get_task("lm")(task.options.model_dump(mode="json"), None, tmp_path)
        assert again.options == task.options


def test_isometric_needs_n_times_dprime_at_most_the_width(lm_root, tmp_path):
    task = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=9, hrr_basis="isometric")
    task.prepare()
    with pytest.raises(TaskError, match=r"input_dim 16: .*N·d' <= d"):
        task.build_model("gru", "lm", 16, 16, task.resolve_hparams({}))


# -- any unit -----------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["lstm", "tpru[roles=8]", "tprn[symbols=6,roles=3,role_dim=4]"])
def test_hrr_lm_trains_around_any_unit(lm_root, tmp_path, unit):
    """The unit's output (width ≠ d for TPRN: symbol_dim·role_dim) is projected to d, read out by the HRR."""
    task = _task(lm_root, tmp_path, **HRR, bptt=10, hrr_anneal_steps=5, hrr_filler_dropout=0.1)
    result = train(task, TrainConfig(unit, "lm", 16, 12, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 8}))
    assert result.status == "finished"
    vocab = task.corpus.vocab_size
    assert result.history[-1]["train_ppl"] < min(result.history[0]["train_ppl"], vocab)
    assert result.test["test"]["ppl"] < vocab
    model = task.build_model(unit, "lm", 16, 12, task.resolve_hparams({}))
    assert model.project.in_features == model.encoder.output_size and model.project.out_features == 12


def test_annealing_counts_updates_and_is_saved(lm_root, tmp_path):
    task = _task(lm_root, tmp_path, **HRR, bptt=10, hrr_anneal_steps=1000)
    train(task, TrainConfig("gru", "lm", 16, 16, epochs=1, seed=0, hparams={"batch_size": 8}), tmp_path / "run")
    updates = sum(1 for _ in task.train_batches(8, torch.Generator(), 1))
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert int(state["model"]["embed.step"]) == updates > 0  # one readout per update; evaluation does not count


# -- the isometry loss through the training loop ---------------------------------------------------


def _aux_seen_by_trainer(task, unit="gru"):
    """What tasks/training.py's hook adds for one training batch (modules found at build time)."""
    task.prepare()
    model = task.build_model(unit, "lm", 16, 16, task.resolve_hparams({}))
    aux_modules = [m for m in model.modules() if hasattr(m, "aux_loss")]  # as training._build finds them
    model.train()
    batch = next(iter(task.train_batches(4, torch.Generator().manual_seed(0), 1)))
    task.loss_with_carry(model, batch, None)
    return model, [m.aux_loss for m in aux_modules if m.aux_loss is not None], batch


def test_isometry_loss_is_found_by_the_trainer_and_weighted_per_sequence(lm_root, tmp_path):
    """lingvo (model.py, base_model._FPropMetrics): loss = Σ tokens xent / B + β·iso. Against the
    per-token mean this is β·B/tokens: β/bptt contiguous, β/(mean sentence length) per sentence."""
    for options, per_row in (({"bptt": 10}, lambda b: 10), ({"contiguous": False}, lambda b: b["mask"].sum() / 4)):
        task = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=3, hrr_basis="isometric", hrr_beta=50.0, **options)
        model, aux, batch = _aux_seen_by_trainer(task)
        assert len(aux) == 1
        expected = 50.0 / float(per_row(batch)) * model.embed.isometry_loss()
        torch.testing.assert_close(aux[0], expected)
    fixed = _task(lm_root, tmp_path, **HRR)
    _, aux, _ = _aux_seen_by_trainer(fixed)
    assert [float(a) for a in aux] == [0.0]


def test_train_aux_is_logged_for_isometric_runs(lm_root, tmp_path):
    task = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=3, hrr_basis="isometric", bptt=10)
    result = train(task, TrainConfig("gru", "lm", 16, 16, epochs=1, seed=0, hparams={"batch_size": 8}))
    assert result.history[0]["train_aux"] > 0


# -- the per-sentence mode ----------------------------------------------------------------------


def test_split_sentences_and_batches_cover_the_stream_once():
    ids = torch.tensor([5, 6, 0, 7, 0, 8, 9, 4, 0, 3])
    sents = split_sentences(ids, 0)
    assert [s.tolist() for s in sents] == [[5, 6, 0], [7, 0], [8, 9, 4, 0], [3]]
    for gen in (None, torch.Generator().manual_seed(1)):
        seen = []
        for x, y, mask in sentence_batches(sents, 3, gen, eos_id=0, pool=1):
            assert x.shape == y.shape == mask.shape and (x[:, 0] == 0).all()  # <eos> stands for the sentence start
            assert (x[:, 1:][mask[:, 1:]] == y[:, :-1][mask[:, 1:]]).all()  # input = target shifted right
            assert (mask.long().diff(dim=1) <= 0).all()  # right-padded
            seen += [y[r][mask[r]].tolist() for r in range(len(y))]
        assert sorted(seen) == sorted(s.tolist() for s in sents)
    first = [y.tolist() for _, y, _ in sentence_batches(sents, 2, torch.Generator().manual_seed(3))]
    again = [y.tolist() for _, y, _ in sentence_batches(sents, 2, torch.Generator().manual_seed(3))]
    assert first == again


def test_sentence_mode_predicts_every_token_once_and_resets_the_state(lm_root, tmp_path):
    contiguous = _task(lm_root, tmp_path, **HRR)
    sentences = _task(lm_root, tmp_path, **HRR, contiguous=False)
    contiguous.prepare()
    sentences.prepare()
    model = sentences.build_model("lstm", "lm", 16, 16, sentences.resolve_hparams({})).eval()
    batches = list(sentences.eval_batches("valid", 0))
    assert sum(int(b["mask"].sum()) for b in batches) == contiguous.streams["valid"].numel()
    # State reset: a sentence's logits do not depend on the batch it is in or on padding.
    b = batches[-1]
    logits, _ = model(b["input"], mask=b["mask"])
    for row in range(b["input"].shape[0]):
        n = int(b["mask"][row].sum())
        alone, _ = model(b["input"][row : row + 1, :n], mask=b["mask"][row : row + 1, :n])
        torch.testing.assert_close(logits[row, :n], alone[0], rtol=1e-5, atol=1e-5)
    metrics = sentences.evaluate(model, "valid", 0)
    assert math.isfinite(metrics["ppl"])


def test_sentence_mode_trains_plain_and_hrr(lm_root, tmp_path):
    for options in ({}, HRR):
        task = _task(lm_root, tmp_path, contiguous=False, **options)
        result = train(task, TrainConfig("lstm", "lm", 16, 16, epochs=2, seed=0, hparams={"lr": 1e-2, "batch_size": 8}))
        assert result.status == "finished"
        assert result.history[-1]["train_ppl"] < result.history[0]["train_ppl"]


# -- counts ---------------------------------------------------------------------------------------


def test_embedding_param_counts(lm_root, tmp_path):
    task = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=5, hrr_roles=2)
    task.prepare()
    v = task.corpus.vocab_size
    counts = task.embedding_param_counts(16)
    assert (counts.formula, counts.plain, counts.total) == (v * 2 * 5, v * 16, v * 2 * 5)  # annealed: no b_w
    iso = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=5, hrr_basis="isometric").embedding_param_counts(16)
    assert iso.formula == v * 10 + 10 * 16 + 2 * 16
    plain = _task(lm_root, tmp_path).embedding_param_counts(16)
    assert (plain.formula, plain.total) == (v * 16, v * 16 + v)
    notes = task.report_notes("lm")
    assert any("HRR embedding" in n and "d' = 5" in n for n in notes) and any("contiguous" in n for n in notes)


def test_tprbench_units_prints_the_embedding_counts(capsys):
    """V·N·d' (+ bases when trained) beside V·d; the paper's PTB big: 6.40M vs 6.50M."""
    from harness.cli import main

    assert main(["units", "lstm", "--dim", "650", "--hrr-fillers", "320"]) == 0
    out = capsys.readouterr().out
    assert "6,500,000" in out and "6,400,000" in out and "V·N·d'" in out
    assert main(["units", "lstm", "--dim", "200", "--hrr-fillers", "100", "--hrr-basis", "isometric", "--vocab", "100"]) == 0
    assert f"{100 * 200 + 200 * 200 + 2 * 200:,}" in capsys.readouterr().out


# -- the authors' lingvo configuration (studies/hrr-ptb-authors.toml) --------------------------------


def test_options_added_later_leave_the_fingerprinted_dump_unchanged(tmp_path):
    """`loss`, `dropout_between_layers`, `hrr_basis_init`, `decoder_bias`, `init_uniform`, `tie` and
    `init_uniform_biases` at their default are not in the options' dump (what a run's fingerprint hashes): every
    lm run trained before them keeps its fingerprint."""
    from tasks.lm.meta import ADDED_LATER, LMOptions

    for options in ({}, HRR, {**HRR, "hrr_basis": "isometric", "contiguous": False}):
        dump = get_task("lm")({"corpus": "ptb", **options}, None, tmp_path).options.model_dump(mode="json")
        assert set(dump) == set(LMOptions.model_fields) - set(ADDED_LATER)
    changed = {**HRR, "hrr_basis": "isometric", "hrr_basis_init": "orthonormal", "loss": "sequence_sum", "dropout_between_layers": True}
    task = get_task("lm")({"corpus": "ptb", **changed}, None, tmp_path)
    dump = task.options.model_dump(mode="json")
    assert {k: dump.get(k) for k in ADDED_LATER} == {
        "loss": "sequence_sum",
        "dropout_between_layers": True,
        "hrr_basis_init": "orthonormal",
        "decoder_bias": None,  # HRR: its readout's b_w follows annealing
        "init_uniform": None,
        "tie": None,
        "init_uniform_biases": None,
    }
    assert get_task("lm")(dump, None, tmp_path).options == task.options  # validates again
    plain = get_task("lm")({"corpus": "ptb", "decoder_bias": False, "init_uniform": 0.05}, None, tmp_path).options
    assert {k: plain.model_dump(mode="json")[k] for k in ("decoder_bias", "init_uniform")} == {"decoder_bias": False, "init_uniform": 0.05}
    zaremba = get_task("lm")({"corpus": "ptb", "tie": False, "init_uniform": 0.1, "init_uniform_biases": True}, None, tmp_path).options
    assert {k: zaremba.model_dump(mode="json")[k] for k in ("tie", "init_uniform_biases")} == {"tie": False, "init_uniform_biases": True}


@pytest.mark.parametrize("hrr", [False, True])
def test_init_uniform_as_lingvo(lm_root, tmp_path, hrr):
    """`init_uniform = s`: every weight matrix of the embedding, unit and projection in [-s, s] (spread over
    it, not constant) and every bias 0, the LSTM's included; the HRR embedding keeps its own draws, so an
    orthonormal start stays orthonormal."""
    extra = {"embedding": "hrr", "hrr_fillers": 4, "hrr_basis": "isometric", "hrr_basis_init": "orthonormal"} if hrr else {}
    task = _task(lm_root, tmp_path, contiguous=False, projection=True, init_uniform=0.05, **extra)
    task.prepare()
    torch.manual_seed(0)
    model = task.build_model("lstm", "lm", 16, 16, task.resolve_hparams({}))
    own = {id(p) for p in model.hrr.parameters()} if hrr else set()
    checked = 0
    for name, p in model.named_parameters():
        if id(p) in own:
            continue
        checked += 1
        if p.dim() >= 2:
            assert p.abs().max() <= 0.05 and p.abs().max() > 0.04 and p.std() > 0.02, name
        else:
            assert torch.count_nonzero(p) == 0, name
    assert checked >= 6  # embedding or not, the LSTM's weights and biases, the projection's
    if hrr:
        assert model.embed.isometry_loss().item() < 1e-9
    assert any("U(±0.05)" in n for n in task.report_notes("lm"))


def test_no_decoder_bias_as_lingvo(lm_root, tmp_path):
    """`decoder_bias = false`: the tied plain decoder has no bias (lingvo's SimpleFullSoftmax zeroes it), one
    parameter vector of V fewer in the model and in the counts, and the model still trains."""
    with_bias = _task(lm_root, tmp_path, contiguous=False, projection=False)
    without = _task(lm_root, tmp_path, contiguous=False, projection=False, decoder_bias=False)
    models = []
    for task in (with_bias, without):
        task.prepare()
        models.append(task.build_model("lstm", "lm", 16, 16, task.resolve_hparams({})))
    v = with_bias.corpus.vocab_size
    assert models[0].decoder.bias is not None and models[1].decoder.bias is None
    assert models[1].decoder.weight is models[1].embed.weight  # still tied
    count = [sum(p.numel() for p in m.parameters()) for m in models]
    assert count[0] - count[1] == v
    assert with_bias.embedding_param_counts(16).total - without.embedding_param_counts(16).total == v
    assert any("no bias on the decoder" in n for n in without.report_notes("lm"))
    batch = next(iter(without.train_batches(8, torch.Generator().manual_seed(0), 1)))
    loss, _ = without.loss(models[1], batch)
    loss.backward()
    assert math.isfinite(loss.item()) and models[1].embed.weight.grad is not None


def test_untied_decoder_at_zaremba_init(lm_root, tmp_path):
    """`tie = false` with `init_uniform = 0.1, init_uniform_biases = true`: Zaremba et al.'s small LSTM LM
    (its own decoder h2y with a bias; every parameter U(±0.1), biases too). The decoder has its own matrix
    (V·d more parameters than tied, in the model and in the counts), each parameter spread over [-0.1, 0.1],
    and the embedding's gradient no longer carries the decoder's."""
    tied = _task(lm_root, tmp_path, projection=False)
    untied = _task(lm_root, tmp_path, projection=False, tie=False, init_uniform=0.1, init_uniform_biases=True)
    models = []
    for task in (tied, untied):
        task.prepare()
        torch.manual_seed(0)
        models.append(task.build_model("lstm", "lm", 16, 16, task.resolve_hparams({})))
    model = models[1]
    v = untied.corpus.vocab_size
    assert model.decoder.weight is not model.embed.weight and model.decoder.bias is not None
    count = [sum(p.numel() for p in m.parameters()) for m in models]
    assert count[1] - count[0] == v * 16
    assert untied.embedding_param_counts(16).total - tied.embedding_param_counts(16).total == v * 16
    for name, p in model.named_parameters():
        assert p.abs().max() <= 0.1 and p.abs().max() > 0.05 and p.std() > 0.03, name  # biases drawn, not 0
    notes = untied.report_notes("lm")
    assert any("untied" in n for n in notes) and any("every parameter U(±0.1)" in n for n in notes)
    batch = next(iter(untied.train_batches(8, torch.Generator().manual_seed(0), 1)))
    loss, _ = untied.loss(model, batch)
    loss.backward()
    assert math.isfinite(loss.item()) and model.decoder.weight.grad.abs().sum() > 0
    unseen = sorted(set(range(v)) - set(batch["input"].flatten().tolist()))
    assert unseen and model.embed.weight.grad[unseen].abs().sum() == 0  # only the words read; tied, every row


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**HRR, "tie": False}, "tie = false is for the plain embedding"),
        ({"init_uniform_biases": True}, "it needs init_uniform"),
        ({**HRR, "hrr_basis_init": "orthonormal"}, 'needs hrr_basis = "isometric"'),
        ({"hrr_basis_init": "orthonormal"}, "hrr_basis_init: HRR options need embedding"),
        ({"loss": "sum"}, "loss"),
        ({**HRR, "decoder_bias": False}, "decoder_bias = false is for the plain embedding"),
        ({"init_uniform": 0}, "init_uniform"),
        ({"init_uniform": 2.0}, "init_uniform"),
    ],
)
def test_bad_authors_options_are_one_clear_error(tmp_path, options, message):
    with pytest.raises(TaskError, match=message) as err:
        get_task("lm")({"corpus": "ptb", **options}, None, tmp_path)
    assert "\n" not in str(err.value)


def test_orthonormal_start_reaches_the_embedding(lm_root, tmp_path):
    task = _task(lm_root, tmp_path, embedding="hrr", hrr_fillers=4, hrr_basis="isometric", hrr_basis_init="orthonormal", projection=False)
    task.prepare()
    model = task.build_model("lstm", "lm", 16, 16, task.resolve_hparams({}))
    assert model.embed.basis_init == "orthonormal" and model.embed.isometry_loss().item() < 1e-9
    assert any("orthonormal (a deviation" in n for n in task.report_notes("lm"))


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("contiguous", [True, False])
def test_sequence_sum_is_lingvos_gradient_with_the_per_token_value(lm_root, tmp_path, contiguous):
    """loss = "sequence_sum": the gradient is that of Σ tokens xent / rows (lingvo, sum_loss_across_tokens_in_batch
    then ÷ batch size) and β weighs the isometry loss unscaled; the value (what train_loss logs) is the per-token
    mean; evaluation is unchanged."""
    common = {**HRR, "hrr_basis": "isometric", "hrr_beta": 3.0, "hrr_filler_dropout": 0.0, "contiguous": contiguous, "bptt": 6}
    mean_task, sum_task = _task(lm_root, tmp_path, **common), _task(lm_root, tmp_path, **common, loss="sequence_sum")
    for t in (mean_task, sum_task):
        t.prepare()
    batch = next(iter(sum_task.train_batches(4, torch.Generator().manual_seed(0), 1)))
    rows = batch["target"].shape[0]
    tokens = int(batch["mask"].sum()) if "mask" in batch else batch["target"].numel()
    losses, grads = {}, {}
    for name, t in (("mean", mean_task), ("sum", sum_task)):
        torch.manual_seed(0)
        model = t.build_model("lstm", "lm", 12, 12, t.resolve_hparams({"dropout": 0.0})).train()
        loss, stats, _ = t.loss_with_carry(model, batch, None)
        model.zero_grad()
        loss.backward()
        losses[name], grads[name] = loss.detach(), _grads(model)
        assert stats["count"] == tokens
        beta = 3.0 if name == "sum" else 3.0 * rows / tokens  # β as written against lingvo's loss
        torch.testing.assert_close(model.embed.aux_loss, beta * model.embed.isometry_loss())
    assert torch.equal(losses["sum"], losses["mean"])  # the logged value: per token
    for n, g in grads["mean"].items():  # the cross-entropy's gradient alone (the aux loss is the trainer's to add)
        torch.testing.assert_close(grads["sum"][n], g * (tokens / rows), rtol=1e-4, atol=1e-6)


def test_sequence_sum_leaves_evaluation_per_token(lm_root, tmp_path):
    mean_task, sum_task = _task(lm_root, tmp_path, contiguous=False), _task(lm_root, tmp_path, contiguous=False, loss="sequence_sum")
    for t in (mean_task, sum_task):
        t.prepare()
    torch.manual_seed(0)
    model = mean_task.build_model("lstm", "lm", 12, 12, mean_task.resolve_hparams({}))
    assert mean_task.evaluate(model, "valid", 0) == sum_task.evaluate(model, "valid", 0)


class _Counting(torch.nn.Dropout):
    def __init__(self, p):
        super().__init__(p)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x)


@pytest.mark.parametrize("contiguous", [True, False])
def test_dropout_between_layers(lm_root, tmp_path, contiguous):
    """lingvo's StackedCuDNNLSTM drops after every layer: with the option the dropout runs on the embedding,
    between the 3 layers (twice) and on the top output; without it, on the embedding and the top only. The
    same weights give the same outputs in eval mode, and the carry is one state per layer either way."""
    calls, outputs = {}, {}
    for between in (False, True):
        task = _task(lm_root, tmp_path, contiguous=contiguous, layers=3, bptt=5, dropout_between_layers=between)
        task.prepare()
        torch.manual_seed(0)
        model = task.build_model("lstm", "lm", 12, 12, task.resolve_hparams({"dropout": 0.5}))
        model.dropout = _Counting(0.5)
        batch = next(iter(task.train_batches(4, torch.Generator().manual_seed(0), 1)))
        model.train()
        logits, carry = model(batch["input"], mask=batch.get("mask"))
        calls[between] = model.dropout.calls
        assert (carry is None) if not contiguous else (len(carry) == 3)
        model.eval()
        outputs[between] = model(batch["input"], mask=batch.get("mask"))[0]
    assert calls == {False: 2, True: 4}
    torch.testing.assert_close(outputs[True], outputs[False])


def test_plateau_schedule_decays_by_09_per_bad_epoch_to_the_floor():
    """lingvo's DevBasedSchedule(decay=0.9) with validation once an epoch (≥ its window of 100 updates apart):
    ×0.9 after every evaluation without a better dev perplexity, never below min_factor 0.01 × lr."""
    from tasks.hparams import HParams
    from tasks.optim import Schedule

    hp = HParams(optimizer="sgd", lr=1.0, schedule="plateau", factor=0.9, patience=0, min_lr=0.01)
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=hp.lr)
    sched = Schedule(opt, hp, "valid_ppl", "minimize")
    lrs = []
    for ppl in [100.0, 90.0, 95.0, 91.0, 89.0, 89.0]:
        sched.step({"valid_ppl": ppl})
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([1.0, 1.0, 0.9, 0.81, 0.81, 0.729])  # 89 ties 89: not better
    for _ in range(60):
        sched.step({"valid_ppl": 1000.0})
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)  # 0.9^44 < 0.01: the floor holds
    state = sched.state_dict()
    again = Schedule(torch.optim.SGD([param], lr=hp.lr), hp, "valid_ppl", "minimize")
    again.load_state_dict(state)
    assert again.torch.min_lrs == [0.01]


def test_min_lr_is_fingerprinted_only_when_set():
    from tasks.hparams import HParams, fingerprint_params

    assert "min_lr" not in fingerprint_params(HParams())
    assert fingerprint_params(HParams(min_lr=0.01))["min_lr"] == 0.01


def test_the_authors_configuration_trains_and_stops(lm_root, tmp_path):
    """The study's hyperparameters end to end on the tiny corpus: per sentence, lingvo's loss, SGD, ×0.9 on
    every epoch without a better validation perplexity down to the floor, stop after `stop_patience` such epochs."""
    task = _task(
        lm_root,
        tmp_path,
        **HRR,
        hrr_basis="isometric",
        hrr_basis_init="orthonormal",
        contiguous=False,
        loss="sequence_sum",
        dropout_between_layers=True,
    )
    hp = {
        "optimizer": "sgd",
        "lr": 1.0,
        "clip": 5.0,
        "batch_size": 16,
        "dropout": 0.5,
        "schedule": "plateau",
        "factor": 0.9,
        "patience": 0,
        "min_lr": 0.85,
        "stop_patience": 3,
    }
    result = train(task, TrainConfig("lstm", "lm", 16, 16, epochs=40, seed=0, hparams=hp))
    assert result.status == "finished"
    h = result.history
    best = math.inf
    for prev, row in zip(h, h[1:]):  # each row's lr is the one its epoch trained at
        expected = prev["lr"] if prev["valid_ppl"] < best else max(prev["lr"] * 0.9, 0.85)
        best = min(best, prev["valid_ppl"])
        assert row["lr"] == pytest.approx(expected)
    assert min(r["lr"] for r in h) == pytest.approx(0.85)  # reached, and held
    assert len(h) < 40 and len(h) - result.best_epoch == 3
