"""How much of each clipped SGD step the HRR language model's LM loss gets beside the isometry penalty.

    TPRBENCH_DATA=../shared/data .venv/bin/python scripts/hrr_gradient_share.py studies/hrr-ptb-authors-small.toml \\
        --arm hrr-iso-big --arm hrr-fixed-big --arm hrr-iso-big-ortho --start --batches 16 \\
        --commits 0f4c9a7 e23b4be a47f184 c7d7817 54d9a0b 329ac1c > reports/hrr-ptb-authors-small/gradient_share.md

For each checkpoint of each arm (the paused runs' `checkpoint.pt` in `records/<study>/state/`, read
from each milestone commit with `git show`; files given with `--checkpoint ARM=PATH`; with `--start` the
run's own first steps from its initial weights) the model is
rebuilt as the run built it (`tasks.training.TrainingSteps`: the cell's task options and seed
hyper-parameters), given the checkpoint's weights and optimiser state, and trained on for `--batches`
steps (dropout on). Before each step the gradients of the LM loss (as the run trains it: with
`loss = "sequence_sum"` the cross-entropy summed over each sentence, averaged over sentences) and of
the auxiliary loss (β·isometry) are taken apart. The table gives the penalty and its gradient's norm
as ranges over those steps (the bases bounce, so one point says little), the LM loss's gradient norm
and the clip factor as medians, and the step the LM loss then gets: lr × clip factor (the lr is the
one the next epoch trains at, from the checkpoint's scheduler).

Why: Isometric-big trains ~3x worse than Fixed-big under the authors' schedule (reports/hrr-ptb-authors-small).
The penalty β‖F Fᵀ − I‖² has curvature up to 8β along symmetric perturbations of F, so plain gradient
descent on it is stable only below lr 2 / (8β) = 1 / (4β) (0.0025 at β = 100); the authors' lr runs
from 1 down to a floor of 0.01. Above that bound only the clip keeps the bases bounded: they bounce
around the isometric set by about one clipped step (lr × clip), the penalty's gradient grows with the
lr (~8β × lr × clip / 2) and the clip factor falls as 1/lr, so the LM loss's step stays near 1/(4β)
whatever the lr. This script measures that instead of asserting it.

Why a script and not `tprbench report`: the report reads the record's metrics; this rebuilds models from
checkpoints kept in git history, which the record does not hold.
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _steps(study_path: str, arm: str, cache_dir: str):
    """(TrainingSteps, cell) for the study's cell whose task label is `arm`, built as its seed run builds it."""
    from harness.bench.train import seed_params
    from harness.driver.jobs import WorkerJob
    from harness.study.load import select
    from tasks.registry import get_task
    from tasks.training import TrainingSteps

    study, cells = select(study_path, [f"task={arm}"])
    if len(cells) != 1:
        raise SystemExit(f"{study_path}: --arm {arm} selects {len(cells)} cells, expected 1")
    cell = cells[0]
    params, _ = seed_params(study, cell)
    job = WorkerJob.for_cell(cell, seed=0, hparams=params, run_dir="", cache_dir=cache_dir, threads=1, deterministic=study.deterministic)
    adapter = get_task(cell.task)(cell.task_options, cell.data, cache_dir)
    return TrainingSteps(adapter, job.train_config(), "cpu"), cell


def _committed_checkpoint(commit: str, state: str, cell_id: str) -> bytes | None:
    """The cell's checkpoint.pt as committed at `commit` (None: the commit holds none for that cell)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, f"{state}/"], capture_output=True, text=True, check=True)
    paths = [p for p in listing.stdout.splitlines() if f"/{cell_id}/" in p and p.endswith("/checkpoint.pt")]
    if not paths:
        return None
    return subprocess.run(["git", "show", f"{commit}:{paths[0]}"], capture_output=True, check=True).stdout


def _norm(grads) -> float:
    return sum(float(g.pow(2).sum()) for g in grads if g is not None) ** 0.5


def measure(steps, checkpoint: dict | None, batches: int) -> dict[str, float]:
    """Gradient norms over `batches` training steps continued from the checkpoint (its weights, optimiser
    and lr): before each step the LM loss's and the auxiliary loss's gradients are taken apart, then the
    trainer's own step (`TrainingSteps.step`: forward, backward of the sum, clip, SGD) moves the weights,
    so the penalty is seen along the trajectory it bounces on, not at one point of it. `checkpoint` None:
    the run's own first steps, from the weights it starts with."""
    from tasks.device import to_device

    model = steps.model
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        steps.session.optimizer.load_state_dict(checkpoint["optimizer"])
    aux_modules = steps.session.aux_modules  # the modules the trainer sums aux losses from
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(0)
    rows = []
    for i, batch in enumerate(steps.batches(1)):
        if i == batches:
            break
        for m in aux_modules:
            m.aux_loss = None
        loss, _stats, _carry = steps.ctx.adapter.loss_with_carry(model, to_device(batch, "cpu"), None)
        aux = [m.aux_loss.reshape(()) for m in aux_modules if m.aux_loss is not None]
        aux_total = torch.stack(aux).sum() if aux else torch.zeros(())
        g_lm = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        g_aux = torch.autograd.grad(aux_total, params, allow_unused=True) if aux_total.requires_grad else [None] * len(params)
        total = [a if b is None else (b if a is None else a + b) for a, b in zip(g_lm, g_aux)]
        rows.append((float(aux_total.detach()), _norm(g_lm), _norm(g_aux), _norm(total)))
        steps.step(batch)
    aux_value, lm, aux_norm, total = zip(*rows)
    clip = steps.hparams.clip
    lr = checkpoint["scheduler"]["_last_lr"][0] if checkpoint is not None else steps.hparams.lr
    factor = statistics.median(min(1.0, clip / t) if clip else 1.0 for t in total)
    return {
        "epoch": checkpoint["epoch"] if checkpoint is not None else 0,
        "lr": lr,
        "aux": (min(aux_value), max(aux_value)),
        "lm": statistics.median(lm),
        "aux_norm": (min(aux_norm), max(aux_norm)),
        "total": statistics.median(total),
        "factor": factor,
        "step": lr * factor,
        "trace": aux_value,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("study")
    ap.add_argument("--arm", action="append", required=True, help="a task label of the study (repeat for several)")
    ap.add_argument("--commits", nargs="*", default=[], help="milestone commits whose committed state holds the checkpoints")
    ap.add_argument("--state", default=None, help="the committed state folder (default records/<study name>/state)")
    ap.add_argument("--checkpoint", action="append", default=[], help="ARM=PATH: a checkpoint file as well")
    ap.add_argument("--start", action="store_true", help="also each arm's first steps from its initial weights")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--cache", default=None, metavar="DIR", help="where the data is cached (default: a temporary directory)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    out = []
    with tempfile.TemporaryDirectory(prefix="tprbench-gradient-share-") as tmp:
        for arm in args.arm:
            steps, cell = _steps(args.study, arm, args.cache or tmp)
            state = args.state or f"records/{cell.study}/state"
            blobs = [("start", None)] if args.start else []  # first: the later rows load weights into the same model
            blobs += [(c, blob) for c in args.commits if (blob := _committed_checkpoint(c, state, cell.id)) is not None]
            blobs += [(path, Path(path).read_bytes()) for a, _, path in (x.partition("=") for x in args.checkpoint) if a == arm]
            for where, blob in blobs:
                checkpoint = None if blob is None else torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
                row = measure(steps, checkpoint, args.batches)
                print(f"{arm} epoch {row['epoch']}: {row}", file=sys.stderr)
                out.append((arm, where, row))

    beta = "β·isometry"
    print(
        f"Gradients over {args.batches} SGD steps continued from each paused run's checkpoint (dropout on; the clip of "
        f"{steps.hparams.clip} over the sum, as the run trains): penalty and its gradient as min–max, the rest medians. "
        "Regenerate: scripts/hrr_gradient_share.py (its docstring has the command).\n"
    )
    print(f"| arm | checkpoint | epoch | next lr | {beta} | ‖∇ LM loss‖ | ‖∇ {beta}‖ | ‖∇ sum‖ | clip factor | LM step (lr × factor) |")
    print("|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arm, where, r in out:
        aux = "–" if not r["aux_norm"][1] else "{:,.0f}–{:,.0f}".format(*r["aux"])
        aux_norm = "–" if not r["aux_norm"][1] else "{:,.0f}–{:,.0f}".format(*r["aux_norm"])
        cells = [arm, where, r["epoch"], f"{r['lr']:.3g}", aux, f"{r['lm']:.1f}", aux_norm, f"{r['total']:,.1f}"]
        cells += [f"{r['factor']:.4f}", f"{r['step']:.4f}"]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    for arm, where, r in out:
        if where == "start" and r["aux_norm"][1]:  # a run's first steps are a trajectory: say it step by step
            print(f"\n{arm}, {beta} before each of its first {len(r['trace'])} updates: " + ", ".join(f"{v:,.3g}" for v in r["trace"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
