"""Optimisers, learning-rate schedules and warm-up, as the resolved `HParams` ask for them.

Built on torch.optim (no hand-written optimiser; `nadam-tf` is torch's NAdam configured as TF's). The one piece written here is the "threshold"
schedule (×factor once when a validation metric crosses a value: TPR-RNN's "lr ×0.5 once when
valid loss < 0.1", the authors' code ischlag/TPR-RNN tpr_rnn_graph.py, `decay_thresh` and
`decay_factor`), which torch has no scheduler for, and the warm-up multiplier, applied around each
optimiser step so it composes with any schedule.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .errors import TaskError
from .hparams import HParams
from .metrics import MINIMIZE


def make_optimizer(params: list[torch.nn.Parameter], hp: HParams) -> torch.optim.Optimizer:
    """adam | nadam | sgd | adadelta with the run's lr, weight decay and the optimiser's own knobs
    (eps left at torch's default for that optimiser unless given)."""
    eps = {} if hp.eps is None else {"eps": hp.eps}
    if hp.optimizer == "adam":
        return torch.optim.Adam(params, lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay, **eps)
    if hp.optimizer == "nadam":
        return torch.optim.NAdam(params, lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay, **eps)
    if hp.optimizer == "nadam-tf":
        # tf.contrib.opt.NadamOptimizer (TPR-RNN's train code) is Adam with a Nesterov step and a
        # *constant* momentum β1; torch's NAdam follows Dozat's schedule μ_t = β1(1 − ½·0.96^{ψt}),
        # ψ = momentum_decay. ψ = ∞ makes μ_t = β1 for every t: the same update as TF's from the
        # first steps on (only the bias correction of the first ~10 steps differs; tests/test_babi.py).
        return torch.optim.NAdam(params, lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay, momentum_decay=math.inf, **eps)
    if hp.optimizer == "sgd":
        return torch.optim.SGD(params, lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
    if hp.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=hp.lr, weight_decay=hp.weight_decay, **eps)
    raise AssertionError(hp.optimizer)  # HParams only admits the names above


class Schedule:
    """One epoch-level learning-rate schedule; `step(row)` after each epoch's validation.

    step: torch StepLR (×lr_gamma every lr_step epochs), or with lr_decay_start > 0 the same decays
    starting after that many epochs (a LambdaLR: Zaremba et al.'s PTB schedule); plateau: torch ReduceLROnPlateau on the
    run's metric (×factor after `patience` epochs without a strictly better value, never below `min_lr`;
    patience 0, factor 0.9, min_lr 0.01·lr is lingvo's DevBasedSchedule as the HRR authors' PTB configs
    use it when validation comes less often than its window, e.g. once an epoch); threshold:
    ×factor once, the first epoch `threshold_metric` is below (or above) `threshold_value`; none.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, hp: HParams, metric: str, direction: str) -> None:
        self.hp, self.optimizer, self.metric = hp, optimizer, metric
        self.fired = False
        self.torch: Any = None
        if hp.schedule == "step" and hp.lr_decay_start:
            start, every, gamma = hp.lr_decay_start, hp.lr_step, hp.lr_gamma
            # After `start` epochs at lr, ×gamma every `every` epochs (epoch e counts finished epochs).
            self.torch = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1.0 if e < start else gamma ** ((e - start) // every + 1))
        elif hp.schedule == "step":
            self.torch = torch.optim.lr_scheduler.StepLR(optimizer, step_size=hp.lr_step, gamma=hp.lr_gamma)
        elif hp.schedule == "plateau":
            self.torch = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer,
                mode="min" if direction == MINIMIZE else "max",
                factor=hp.factor,
                patience=hp.patience,
                threshold=0.0,
                min_lr=hp.min_lr,
            )

    def step(self, row: dict[str, float]) -> None:
        if self.hp.schedule == "step":
            self.torch.step()
        elif self.hp.schedule == "plateau":
            self.torch.step(row[self.metric])
        elif self.hp.schedule == "threshold" and not self.fired:
            key = self.hp.threshold_metric
            if key not in row:
                raise TaskError(f"threshold schedule: metric {key!r} is not logged (logged: {', '.join(sorted(row))})")
            value = row[key]
            if value < self.hp.threshold_value if self.hp.threshold_mode == "below" else value > self.hp.threshold_value:
                for group in self.optimizer.param_groups:
                    group["lr"] *= self.hp.factor
                self.fired = True

    def state_dict(self) -> dict[str, Any]:
        # The step schedule's state is StepLR's own dict, as checkpoints before typed hparams stored it.
        if self.torch is not None:
            return self.torch.state_dict()
        return {"fired": self.fired}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.torch is not None:
            self.torch.load_state_dict(state)
        else:
            self.fired = bool(state.get("fired", False))


def optimizer_step(optimizer: torch.optim.Optimizer, hp: HParams, step: int) -> None:
    """One optimiser step; during the first `warmup_steps` steps at lr × warmup_factor (the
    schedule's lr is put back afterwards, so warm-up composes with every schedule)."""
    if step >= hp.warmup_steps or hp.warmup_factor == 1.0:
        optimizer.step()
        return
    saved = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * hp.warmup_factor
    try:
        optimizer.step()
    finally:
        for group, lr in zip(optimizer.param_groups, saved):
            group["lr"] = lr
