"""The `babi` task (tasks/babi/adapter.py, models.py) and what was built for it: the tpr-rnn and
plain architectures, the paper's training settings through the shared loop (nadam-tf, warm-up,
threshold decay, stop rules), the test summary (mean error, failed tasks), study matrices whose
size follows from the unit, and the splits × models report.

The synthetic data below needs no files; the real-data tests skip without $TPRBENCH_DATA/babi.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from tasks.babi.adapter import BabiTask
from tasks.babi.models import SentenceModel, TPRRNNModel
from tasks.errors import TaskError
from tasks.hparams import HParams
from tasks.optim import make_optimizer
from tasks.registry import get_task
from tasks.training import TrainConfig, train
from units.tpr_rnn import tpr_rnn_params

DATA = Path(os.environ.get("TPRBENCH_DATA", "/nonexistent")) / "babi"
needs_data = pytest.mark.skipif(not (DATA / "en-10k").is_dir(), reason="bAbI data not found under $TPRBENCH_DATA/babi")

# A tiny task-1-like file: where is X? answered by X's last move.
NAMES, PLACES = ("mary", "john", "sandra"), ("kitchen", "garden", "office", "hallway")


def _story(rng: torch.Generator) -> str:
    lines, where, n = [], {}, 1
    for _ in range(int(torch.randint(2, 6, (1,), generator=rng))):
        who = NAMES[int(torch.randint(3, (1,), generator=rng))]
        place = PLACES[int(torch.randint(4, (1,), generator=rng))]
        where[who] = place
        lines.append(f"{n} {who.title()} went to the {place}.")
        n += 1
    who = next(iter(where))
    lines.append(f"{n} Where is {who.title()}? \t{where[who]}\t1")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("babi") / "babi"
    rng = torch.Generator().manual_seed(0)
    for size, n in (("en-10k", 200), ("en", 40)):
        for task, name in ((1, "single-supporting-fact"), (2, "two-supporting-facts")):
            for split, count in (("train", n), ("test", 40)):
                path = root / size / f"qa{task}_{name}_{split}.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(_story(rng) for _ in range(count)) + "\n")
    (root / "en" / "qa3_three-supporting-facts_train.txt").write_text(
        textwrap.dedent("""\
        1 Mary went to the kitchen.
        2 Where is Mary? \tkitchen\t1
        """)
        * 20
    )
    for size in ("en", "en-10k"):  # qa3: a test file in both, a train file only in 1k (as ../shared/data)
        (root / size / "qa3_three-supporting-facts_test.txt").write_text(
            textwrap.dedent("""\
            1 John went to the garden.
            2 Where is John? \tgarden\t1
            """)
            * 10
        )
    return root


def adapter(folder: Path, tmp_path: Path, **options) -> BabiTask:
    task = get_task("babi")({"tasks": "1", **options}, str(folder), tmp_path / "cache")
    task.prepare()
    return task


# --------------------------------------------------------------------------------------------
# The adapter
# --------------------------------------------------------------------------------------------
def test_registered_with_its_archs_metrics_and_the_papers_single_task_defaults():
    cls = get_task("babi")
    assert cls.archs == ("tpr-rnn", "plain") and cls.metric == "acc" and cls.metrics == ("loss", "acc", "error")
    assert [cls.metric_direction(m) for m in cls.metrics] == ["minimize", "maximize", "minimize"]
    hp = cls.resolve_hparams({})
    assert (hp.optimizer, hp.lr, hp.betas, hp.batch_size, hp.clip) == ("nadam-tf", 0.008, (0.6, 0.4), 128, 5.0)
    assert (hp.warmup_steps, hp.warmup_factor, hp.nan_restarts) == (50, 0.1, 10)
    assert (hp.schedule, hp.threshold_metric, hp.threshold_value, hp.threshold_mode, hp.factor) == ("threshold", "valid_loss", 0.1, "below", 0.5)
    assert hp.embed_init == 0.01  # the paper (the code: 0.1)


def test_splits_batches_and_metrics(folder, tmp_path):
    task = adapter(folder, tmp_path, tasks="1,2")
    assert task.valid_split == "valid" and task.test_splits == ["qa1", "qa2"]
    batches = list(task.train_batches(16, torch.Generator().manual_seed(0), 1))
    assert sum(len(b["answer"]) for b in batches) == len(task.babi["train"])
    again = list(task.train_batches(16, torch.Generator().manual_seed(0), 1))
    assert all(torch.equal(a["answer"], b["answer"]) for a, b in zip(batches, again))  # all randomness from the generator
    b = batches[0]
    assert b["stories"].shape[:2] == (16, int(b["lengths"].max())) and b["question"].shape == (16, task.babi.max_words)
    evals = list(task.eval_batches("qa1", 8))
    assert sum(len(e["answer"]) for e in evals) == len(task.babi["qa1"])
    assert all(int(e["lengths"].max()) == e["stories"].shape[1] for e in evals)
    m = task.metrics_from_counts(3.0, {"correct": 3, "count": 4})
    assert m == {"loss": 0.75, "acc": 0.75, "error": 25.0}


def test_summary_is_mean_error_and_failed_tasks_and_flags_the_1k_fallback(folder, tmp_path):
    task = adapter(folder, tmp_path, tasks="1-3", fallback_1k=True)
    assert task.babi.fallbacks and 3 in task.babi.fallbacks
    results = {"qa1": {"error": 0.0}, "qa2": {"error": 6.0}, "qa3": {"error": 5.0}}
    summary = task.summarize_tests(results)["summary"]
    assert summary["mean_error"] == pytest.approx(11 / 3) and summary["failed"] == 1.0  # > 5% fails, 5.0 does not
    assert summary["tasks"] == 3.0 and summary["fallback_1k_qa3"] == 1.0


def test_bad_options_are_clear_errors(folder, tmp_path):
    cls = get_task("babi")
    for options, match in (
        ({"tasks": "0-3"}, "outside 1..20"),
        ({"tasks": "x"}, "cannot read 'x'"),
        ({"size": "2k"}, "size"),
        ({"valid_fraction": 0}, "valid_fraction"),
        ({"max_story": 0}, "max_story"),
        ({"tasksx": "1"}, "did you mean 'tasks'"),
        ({"symbol_size": 5}, "symbol_size"),
    ):
        with pytest.raises(TaskError, match=match):
            cls(options, str(folder), tmp_path)
    assert cls({"tasks": 3}, str(folder), tmp_path).options.tasks == "3"  # a TOML integer reads as the task id
    with pytest.raises(Exception, match="fallback_1k=True"):  # the 10k qa3 train file is absent
        cls({"tasks": "3"}, str(folder), tmp_path / "c").prepare()
    with pytest.raises(Exception, match="not found"):
        cls({}, str(tmp_path / "nowhere"), tmp_path).check_data()


def test_tpr_rnn_needs_a_single_tpr3_unit_and_says_so():
    cls = get_task("babi")
    for unit in ("lstm", "tpr3[layers=2]", "tpr3[bidirectional=true]"):
        with pytest.raises(TaskError, match="needs a single tpr3 unit.*use arch 'plain'"):
            cls.check_unit("tpr-rnn", unit)
    cls.check_unit("tpr-rnn", "tpr3[entity=4,relation=3]")
    cls.check_unit("plain", "tpr3")  # the baseline takes any unit


def test_unused_hyperparameters_and_input_dim_are_errors(folder, tmp_path):
    task = adapter(folder, tmp_path)
    hp = task.resolve_hparams({})
    with pytest.raises(TaskError, match="no dropout"):
        task.build_model("tpr3", "tpr-rnn", 2250, 2250, task.resolve_hparams({"dropout": 0.1}))
    with pytest.raises(TaskError, match="mlp_hidden"):
        task.build_model("gru", "plain", 8, 8, task.resolve_hparams({"mlp_hidden": 4}))
    with pytest.raises(TaskError, match="input_dim=5 would be unused"):
        task.build_model("gru", "plain", 8, 5, hp)
    model = adapter(folder, tmp_path / "b", symbol_size="input_dim").build_model("gru", "plain", 8, 5, hp)
    assert model.encoder.symbol_size == 5


# --------------------------------------------------------------------------------------------
# The architectures
# --------------------------------------------------------------------------------------------
def test_tpr_rnn_model_has_the_papers_parameter_count_at_task_1_sizes(folder, tmp_path):
    task = adapter(folder, tmp_path)
    V, L = task.babi.vocab_size, task.babi.max_words
    model = task.build_model("tpr3", "tpr-rnn", 2250, 2250, task.resolve_hparams({}))
    assert isinstance(model, TPRRNNModel) and model.encoder.symbol_size == V  # S = H = V
    assert sum(p.numel() for p in model.parameters()) == tpr_rnn_params(V, V, L, 15, 10)
    # at task 1's real sizes (V = 22, L = 7) that formula is the paper's 7,943 (tests/test_tpr_rnn.py)
    assert tpr_rnn_params(22, 22, 7, 15, 10) == 7943
    assert model.encoder.embedding.abs().max() <= 0.01  # the paper's init; embed_init changes it
    wide = task.build_model("tpr3", "tpr-rnn", 2250, 2250, task.resolve_hparams({"embed_init": 0.1}))
    assert wide.encoder.embedding.abs().max() > 0.05


def _batch(task: BabiTask, n: int = 6) -> dict[str, torch.Tensor]:
    return task.babi["train"].batch(torch.arange(n))


@pytest.mark.parametrize(
    "arch, unit, dim", [("tpr-rnn", "tpr3[entity=4,relation=3]", 48), ("plain", "lstm", 8), ("plain", "gru", 8), ("plain", "tpru[roles=4]", 8)]
)
def test_padding_more_sentences_or_words_leaves_the_logits_unchanged(folder, tmp_path, arch, unit, dim):
    task = adapter(folder, tmp_path)
    torch.manual_seed(0)
    model = task.build_model(unit, arch, dim, dim, task.resolve_hparams({})).double().eval()
    b = _batch(task)
    logits = model(b["stories"], b["lengths"], b["question"])
    longer = torch.nn.functional.pad(b["stories"], (0, 0, 0, 5))  # five more all-PAD sentences
    assert torch.allclose(model(longer, b["lengths"], b["question"]), logits, atol=1e-12)
    one = model(b["stories"][:1, : int(b["lengths"][0])], b["lengths"][:1], b["question"][:1])
    assert torch.allclose(one, logits[:1], atol=1e-12)  # alone, unpadded
    narrow = b["question"][:, : int((b["question"] != 0).sum(1).max())]  # fewer word slots (PAD summed in anyway)
    assert torch.allclose(model(b["stories"], b["lengths"], narrow), logits, atol=1e-12)


def test_plain_puts_the_question_right_after_each_story(folder, tmp_path):
    task = adapter(folder, tmp_path)
    model = task.build_model("gru", "plain", 8, 8, task.resolve_hparams({}))
    assert isinstance(model, SentenceModel)
    seen = {}
    model.unit.register_forward_hook(lambda m, args, out: seen.update(x=args[0], mask=args[1]))
    b = _batch(task)
    model(b["stories"], b["lengths"], b["question"])
    q = model.encoder(b["question"])
    for i, n in enumerate(b["lengths"].tolist()):
        assert torch.equal(seen["x"][i, n], q[i]) and seen["mask"][i].sum() == n + 1


# --------------------------------------------------------------------------------------------
# Training as the paper, through the shared loop
# --------------------------------------------------------------------------------------------
def _tf_nadam(grads: list[torch.Tensor], lr: float, b1: float, b2: float, eps: float = 1e-8) -> list[torch.Tensor]:
    """tf.contrib.opt.NadamOptimizer (training_ops ApplyAdam with use_nesterov), transcribed."""
    p, m, v, out = torch.zeros_like(grads[0]), torch.zeros_like(grads[0]), torch.zeros_like(grads[0]), []
    for t, g in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        p = p - lr * math.sqrt(1 - b2**t) / (1 - b1**t) * (b1 * m + (1 - b1) * g) / (v.sqrt() + eps)
        out.append(p.clone())
    return out


def _steps(name: str, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    p = nn.Parameter(torch.zeros_like(grads[0]))
    opt = make_optimizer([p], HParams(optimizer=name, lr=0.008, betas=(0.6, 0.4)))
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append(p.detach().clone())
    return out


def test_nadam_tf_takes_tensorflows_steps_and_torchs_nadam_does_not():
    torch.manual_seed(0)
    grads = [torch.randn(5, dtype=torch.float64) for _ in range(40)]
    ref = _tf_nadam(grads, 0.008, 0.6, 0.4)

    def update_gap(got: list[torch.Tensor], t: int) -> float:  # relative difference of step t's update
        return float(((got[t] - got[t - 1]) - (ref[t] - ref[t - 1])).norm() / (ref[t] - ref[t - 1]).norm())

    tf_like, dozat = _steps("nadam-tf", grads), _steps("nadam", grads)
    # Only the first steps' bias correction of the momentum term differs (1 − β1^{t+1} vs 1 − β1^t) …
    assert all(update_gap(tf_like, t) < 1e-3 for t in range(15, 40))
    # … whereas Dozat's schedule μ_t = β1(1 − ½·0.96^{0.004 t}) ≈ β1/2 early on takes other steps.
    gaps = [update_gap(dozat, t) for t in range(15, 40)]
    assert min(gaps) > 0.05 and sum(gaps) / len(gaps) > 0.2


def test_warm_up_and_the_threshold_decay_set_the_learning_rate(folder, tmp_path):
    task = adapter(folder, tmp_path)
    seen = []
    original = torch.optim.NAdam.step

    def step(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    torch.optim.NAdam.step = step
    try:
        result = train(
            task,
            TrainConfig(
                "tpr3[entity=4,relation=3]",
                "tpr-rnn",
                48,
                48,
                epochs=2,
                seed=0,
                hparams={"batch_size": 16, "warmup_steps": 5, "threshold_value": 100.0},
            ),
        )
    finally:
        torch.optim.NAdam.step = original
    assert seen[:5] == pytest.approx([0.0008] * 5) and seen[5] == pytest.approx(0.008)  # lr/10 for 5 steps
    # the lr each epoch trained with: valid loss < 100 after epoch 1 halves it, once
    assert [row["lr"] for row in result.history] == pytest.approx([0.008, 0.004])


def test_stop_value_ends_the_run_and_a_resumed_run_stops_there_too(folder, tmp_path):
    task = adapter(folder, tmp_path)
    cfg = TrainConfig("gru", "plain", 8, 8, epochs=6, seed=0, hparams={"batch_size": 16, "stop_value": 0.0})
    result = train(task, cfg, tmp_path / "run")
    assert len(result.history) == 1 and any("stop_value" in n for n in result.notes)  # any accuracy ≥ 0
    (tmp_path / "run" / "result.json").unlink()
    again = train(task, cfg, tmp_path / "run")  # from the epoch-1 checkpoint: stops before epoch 2
    assert len(again.history) == 1 and again.resumed_from_epoch == 1
    patient = train(task, TrainConfig("gru", "plain", 8, 8, epochs=6, seed=0, hparams={"batch_size": 16, "stop_patience": 1, "lr": 1e-9}))
    assert len(patient.history) < 6 and any("stop_patience" in n for n in patient.notes)


def test_stop_fields_at_their_defaults_leave_fingerprints_as_they_were(folder, tmp_path):
    from tasks.hparams import ADDED_LATER, as_params, fingerprint_params

    hp = get_task("logic").resolve_hparams({})
    assert "stop_value" in as_params(hp) and "stop_value" not in fingerprint_params(hp)
    assert fingerprint_params(hp) == {k: v for k, v in as_params(hp).items() if k not in ADDED_LATER}
    assert {"stop_value", "epoch_updates", "data_order", "min_lr"} <= set(ADDED_LATER)
    assert fingerprint_params(hp.model_copy(update={"stop_patience": 3}))["stop_patience"] == 3


def _stream(task: BabiTask, epochs: int, **hp) -> list[torch.Tensor]:
    """The training examples (their positions in the train split) of each batch of `epochs` epochs."""
    from tasks.training import TrainingSteps

    seen: list[torch.Tensor] = []
    steps = TrainingSteps(task, TrainConfig("gru", "plain", 8, 8, epochs=epochs, seed=4, hparams={"batch_size": 48, **hp}))
    build = task.train_batch
    task.train_batch = lambda index: seen.append(index) or build(index)  # type: ignore[method-assign]
    try:
        for epoch in range(1, epochs + 1):
            list(steps.batches(epoch))
    finally:
        del task.train_batch
    return seen


def test_the_stream_is_full_batches_across_passes_and_fixed_order_repeats_one_permutation(folder, tmp_path):
    """epoch_updates: the authors' `.cache().repeat().batch()` — every batch full, a pass's tail
    joined to the next pass's head, K batches an epoch; data_order = fixed: the same order every pass."""
    task = adapter(folder, tmp_path)
    n = task.train_example_count()
    assert n % 48, "the test needs passes that end inside a batch"
    fixed = _stream(task, 3, epoch_updates=5, data_order="fixed")
    assert len(fixed) == 15 and all(len(b) == 48 for b in fixed)
    flat = torch.cat(fixed)
    first = torch.randperm(n, generator=torch.Generator().manual_seed(4 * 100_003 + 1))  # pass 1's order for seed 4
    assert torch.equal(flat, first.repeat(len(flat) // n + 1)[: len(flat)])
    reshuffled = torch.cat(_stream(task, 3, epoch_updates=5))
    assert torch.equal(reshuffled[:n], first) and not torch.equal(reshuffled[n : 2 * n], first)  # a new order each pass
    assert sorted(reshuffled[n : 2 * n].tolist()) == list(range(n))  # each pass is the whole data once
    assert torch.equal(torch.cat(_stream(task, 2, epoch_updates=5, data_order="fixed")), flat[: 10 * 48])  # epochs are positions


def test_a_stream_run_resumed_mid_way_ends_as_an_uninterrupted_one(folder, tmp_path):
    task = adapter(folder, tmp_path)
    hp = {"batch_size": 16, "epoch_updates": 3, "data_order": "fixed"}
    cfg = TrainConfig("gru", "plain", 8, 8, epochs=4, seed=0, hparams=hp)
    straight = train(task, cfg, tmp_path / "straight")
    paused = train(task, cfg, tmp_path / "run", until_epoch=2)
    assert paused.status == "paused" and len(paused.history) == 2
    done = train(task, cfg, tmp_path / "run")
    assert done.resumed_from_epoch == 2
    strip = lambda h: [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in h]  # noqa: E731
    assert strip(done.history) == strip(straight.history) and done.test == straight.test


def test_epoch_updates_on_a_task_without_train_batch_is_refused_before_training(tmp_path):
    logic = get_task("logic")({"train_size": 64, "eval_size": 16}, "generated", tmp_path / "cache")
    with pytest.raises(TaskError, match="epoch_updates = 5: task 'logic' builds its training batches a pass at a time"):
        train(logic, TrainConfig("gru", "plain", 8, 8, epochs=1, hparams={"epoch_updates": 5}))


@pytest.mark.slow
@needs_data
def test_task_1_reaches_one_percent_test_error_on_cpu(tmp_path):
    """The paper's single-task model and training on the real task 1 (10k),
    with the authors' code's embedding init (±0.1: ≤ 1% after 3-4 epochs, ±0.01 needs 7-8)."""
    task = get_task("babi")({"tasks": "1"}, str(DATA), tmp_path)
    torch.manual_seed(0)
    result = train(task, TrainConfig("tpr3", "tpr-rnn", 2250, 2250, epochs=10, seed=0, hparams={"stop_value": 1.0, "embed_init": 0.1}))
    assert result.status == "finished"
    assert result.test["qa1"]["error"] <= 1.0, result.history
    assert result.test["summary"] == {"mean_error": result.test["qa1"]["error"], "tasks": 1.0, "failed": 0.0}


# --------------------------------------------------------------------------------------------
# Study files: several matrices, sizes from the spec, arch × unit checked
# --------------------------------------------------------------------------------------------
STUDY = """
[study]
name = "babi-t"
epochs = 2
seeds = 1

[[tasks]]
name = "babi"
label = "qa1"
data = "{data}"
options = {{ tasks = "1" }}

[[matrix]]
arch = "tpr-rnn"
units = ["tpr3", "tpr3[entity=4,relation=3]"]

[[matrix]]
arch = "plain"
dim = 16
units = ["lstm", "gru"]
"""


def test_a_study_pairs_tpr_rnn_with_tpr3_at_its_own_size(folder):
    from harness.study.cells import expand
    from harness.study.load import parse_study
    from harness.study.schema import StudyError

    study = parse_study(STUDY.format(data=folder))
    cells = expand(study)
    assert [(c.arch, c.unit, c.dim) for c in cells] == [
        ("tpr-rnn", "tpr3", 2250),
        ("tpr-rnn", "tpr3[entity=4,relation=3]", 48),
        ("plain", "lstm", 16),
        ("plain", "gru", 16),
    ]
    assert cells[0].label == "qa1/tpr-rnn/d2250/tpr3"
    bad = STUDY.replace('units = ["tpr3", "tpr3[entity=4,relation=3]"]', 'units = ["tpr3", "gru"]')
    with pytest.raises(StudyError, match=r"matrix\[0\].dim: required key is missing: unit 'gru' takes any size"):
        parse_study(bad.format(data=folder))
    wrong = STUDY.replace('arch = "plain"\ndim = 16', 'arch = "tpr-rnn"\ndim = 16')
    with pytest.raises(StudyError) as info:
        parse_study(wrong.format(data=folder))
    text = str(info.value)
    assert "matrix[1].units[0]" in text and "needs a single tpr3 unit" in text
    sized = STUDY.replace('units = ["tpr3", "tpr3[entity=4,relation=3]"]', 'dim = 64\nunits = ["tpr3"]')
    with pytest.raises(StudyError, match=r"matrix\[0\].units\[0\].*entity·relation·entity = 15·10·15 = 2250"):
        parse_study(sized.format(data=folder))


def test_the_shipped_babi_studies_parse_and_expand():
    from harness.study.cells import expand
    from harness.study.load import load_study

    root = Path(__file__).resolve().parents[1] / "studies"
    os.environ.setdefault("TPRBENCH_DATA", "/data")
    cpu = expand(load_study(root / "babi-cpu.toml"))
    assert {c.task_label for c in cpu} == {f"qa{t}" for t in range(1, 21)}
    assert {(c.arch, c.unit, c.dim) for c in cpu} >= {("tpr-rnn", "tpr3", 2250), ("plain", "lstm", 64), ("plain", "gru", 64)}
    assert all(c.task_options["size"] == "1k" and c.task_options["tasks"] == c.task_label[2:] for c in cpu)
    paper = expand(load_study(root / "babi-paper.toml"))
    assert {c.task_options["tasks"] for c in paper} == {"1-20"}
    assert ("tpr-rnn", "tpr3[entity=40,mlp_hidden=90,relation=20]", 32000) in {(c.arch, c.unit, c.dim) for c in paper}
    assert all(c.search["lr"]["value"] == 1e-3 and c.search["batch_size"]["value"] == 32 for c in paper)


# --------------------------------------------------------------------------------------------
# The report: splits × models
# --------------------------------------------------------------------------------------------
def _agg_rows():
    """An aggregated frame as harness.report.aggregate makes it: two single-task models on qa1/qa2
    (2 seeds each) and one all-task model; acc per seed."""
    import pandas as pd

    rows, order = [], 0

    def cell(label, arch, unit, dim, accs: dict[str, dict[int, float]], options, summary=None, epochs=None):
        nonlocal order
        base = {
            "order": order,
            "cell_id": f"c{order}",
            "task": "babi",
            "task_label": label,
            "label": f"{label}/{arch}",
            "arch": arch,
            "dim": dim,
            "input_dim": dim,
            "unit": unit,
            "unit_short": unit,
            "unit_name": unit,
            "metric": "acc",
            "direction": "maximize",
            "seeds_wanted": 2,
            "seeds_finished": 2,
            "seeds_failed": 0,
            "seeds_missing": 0,
            "task_options": json.dumps(options),
            "summary": json.dumps(summary or {}),
            "roles": None,
            "slices": None,
            "params_formula": 10,
            "params_total": 12,
            "failed_seeds": "",
            "missing_seeds": "",
            "failure_reasons": "",
            "final_params": None,
            "final_params_hash": "h",
            "trials": 0,
            "trials_pruned": 0,
            "trials_failed": 0,
            "best_search": float("nan"),
            "best_trial": None,
            "git_commits": "abc",
            "best_epochs": json.dumps(epochs or {}),
        }
        for k, (split, by_seed) in enumerate([("valid", {0: 1.0, 1: 1.0})] + list(accs.items())):
            rows.append({**base, "split": split, "split_order": k, "mean": 0, "std": 0, "n": len(by_seed), "by_seed": json.dumps(by_seed)})
        order += 1

    cell("qa1", "tpr-rnn", "tpr3", 2250, {"qa1": {0: 1.0, 1: 0.99}}, {"tasks": "1"}, epochs={0: 5, 1: 7})
    cell("qa1", "plain", "lstm", 64, {"qa1": {0: 0.5, 1: 0.6}}, {"tasks": "1"}, epochs={0: 30, 1: 41})
    cell("qa3", "tpr-rnn", "tpr3", 2250, {"qa3": {0: 0.9, 1: 0.97}}, {"tasks": "3", "fallback_1k": True}, {"fallback_1k_qa3": 1.0})
    cell("qa3", "plain", "lstm", 64, {"qa3": {0: 0.2}}, {"tasks": "3", "fallback_1k": True}, {"fallback_1k_qa3": 1.0})
    cell("all", "tpr-rnn", "tpr3", 2250, {"qa1": {0: 1.0}, "qa3": {0: 0.98}}, {"tasks": "1,3"}, epochs={0: 60})
    return pd.DataFrame(rows)


def test_epochs_pivot_is_each_seeds_kept_epoch_per_task_and_model():
    """bAbI's "epochs to convergence": the epoch each finished seed kept, mean ± std; an all-task
    model's epoch stands on every row; a cell without recorded epochs shows a dash."""
    from harness.report.pivot import epochs_pivot

    columns, rows = epochs_pivot(_agg_rows())
    assert columns == ["task", "tpr-rnn · tpr3 · d=2250 (single-task)", "plain · lstm · d=64 (single-task)", "tpr-rnn · tpr3 · d=2250 (all-task)"]
    assert rows[0] == ["qa1", "6.0 ± 1.4", "35.5 ± 7.8", "60.0 ± –"]
    assert rows[1] == ["qa3¹", "–", "–", "60.0 ± –"]


def test_pivot_rows_are_tasks_and_the_bottom_rows_are_per_run():
    from harness.report.pivot import split_pivot

    columns, rows, notes = split_pivot(_agg_rows(), {"paper": {"qa3": "1.78", "mean error": "1.12 ± 1.19"}})
    assert columns == [
        "task",
        "tpr-rnn · tpr3 · d=2250 (single-task)",
        "plain · lstm · d=64 (single-task)",
        "tpr-rnn · tpr3 · d=2250 (all-task)",
        "paper",
    ]
    assert rows[0] == ["qa1", "0.50 ± 0.71", "45.00 ± 7.07", "0.00 ± –", "–"]
    assert rows[1] == ["qa3¹", "6.50 ± 4.95", "80.00 ± –", "2.00 ± –", "1.78"]
    # run 0: errors 0 and 10 → mean 5, one failure; run 1: 1 and 3 → mean 2, none
    assert rows[2] == ["mean error", "3.50 ± 2.12", "65.00 ± –", "1.00 ± –", "1.12 ± 1.19"]
    assert rows[3] == ["failed (> 5%)", "0.50 ± 0.71", "2.00 ± –", "0.00 ± –", "–"]
    assert notes[0].startswith("¹ qa3: trained on the 1k train file")
    assert any("plain · lstm" in n and "1 run(s) complete" in n for n in notes)


def test_babi_studies_render_the_pivot_first_in_markdown_and_latex():
    from harness.report.render import make_table, sections

    df = _agg_rows()
    secs = sections(df)
    assert secs[0].layout == "babi" and secs[0].rows[-1][0] == "failed (> 5%)"
    assert secs[1].task_label == "babi epochs" and secs[1].rows[0][0] == "qa1"
    assert "PyTorch port" in " ".join(secs[0].columns)  # the task's references
    md = make_table(df, "markdown")
    assert md.index("babi per task") < md.index("## qa1") and "| mean error |" in md
    assert "failed (> 5\\%)" in make_table(df, "latex")


def test_pivot_gives_each_arm_of_one_task_its_own_column():
    """babi-qa17-isolate's arms: task entries that train the same model on the same task with a
    different loop (labels qa1-stream beside qa1). Each arm is a column; the per-task labels of the
    plain single-task cells (qa1, qa3) stay one column, as before."""
    import pandas as pd

    from harness.report.pivot import split_pivot

    df = _agg_rows()
    arm = df[df["cell_id"] == "c0"].copy()
    arm["order"], arm["cell_id"], arm["task_label"], arm["label"] = 9, "c9", "qa1-stream", "qa1-stream/tpr-rnn"
    arm.loc[arm["split"] == "qa1", "by_seed"] = json.dumps({0: 0.8, 1: 0.7})
    columns, rows, notes = split_pivot(pd.concat([df, arm], ignore_index=True))
    assert columns == [
        "task",
        "tpr-rnn · tpr3 · d=2250 (single-task)",
        "plain · lstm · d=64 (single-task)",
        "tpr-rnn · tpr3 · d=2250 (all-task)",
        "tpr-rnn · tpr3 · d=2250 (single-task) · stream",
    ]
    assert rows[0] == ["qa1", "0.50 ± 0.71", "45.00 ± 7.07", "0.00 ± –", "25.00 ± 7.07"]
    assert rows[1][0] == "qa3¹" and rows[1][-1] == "–"
    assert not any("covered by two cells" in n for n in notes)
