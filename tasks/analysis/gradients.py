"""Gradient flow through a recurrent unit along real sequences (the TPRU ICLR-2020 paper, §4).

The paper argues from the step Jacobian J_t = ∂b_t/∂b_{t−1}: when W_r = W_u and V_b = I
(Modification I) its spectrum follows that of W_r E, so gradients explode or vanish; under
Modification II a positive portion of b_{t−1} can never be removed from the candidate; under
Modification III softmax puts no penalty on extreme fillers. It gives no code. Three
measurements turn that into numbers for any unit that exposes its state (`forward_carry`):

- **‖∂L/∂s_t‖ against t**: the total derivative of the task loss with respect to the state after
  step t (all later steps and every layer above included), averaged over the sequences that
  reach t. Taken by running the analysed unit one step at a time inside the real model (`record`)
  and keeping each state's gradient.
- **the spectrum of J_t** at every real step of every sequence: largest singular value σ_max
  (and how often it exceeds 1) and spectral radius, with `torch.func.jacrev` vmapped over all
  (s_{t−1}, x_t) pairs (`jacobians`).
- **the update's overlap with the old state**: cos(s_t − s_{t−1}, s_{t−1}) for every unit, and for
  the TPRU family the candidate's projection ⟨b̃_t, b_{t−1}⟩/‖b_{t−1}‖² and how often it is
  positive (Mod II's argument).

s_t is the whole carried state (LSTM: [h; c]), see `carry.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from units.base import last_state, lengths_from_mask, mask_from_lengths, mask_outputs

from ..device import to_device
from .carry import CarryLayout, check_steppable, first_step, layout_of, reference_path, step_function


@dataclass
class Recorded:
    """One call of the analysed unit, run step by step: inputs, lengths, the states s_1..s_T (kept
    in the graph: after `backward`, `grads()` gives ∂L/∂s_t) and the layout of the carry."""

    x: torch.Tensor
    lengths: torch.Tensor
    states: list[torch.Tensor]
    layout: CarryLayout

    def stacked_states(self) -> torch.Tensor:
        return torch.stack([s.detach() for s in self.states], 1)  # [B, T, D]

    def grads(self) -> torch.Tensor:
        """∂L/∂s_t [B, T, D] (zeros where no gradient reached, e.g. padding)."""
        return torch.stack([s.grad if s.grad is not None else torch.zeros_like(s) for s in self.states], 1)


def output_offset(out: torch.Tensor, s: torch.Tensor) -> int | None:
    """Where the step's output sits inside the flat state, if it does (TPRU b, GRU h, LSTM h of
    (h, c), TPRN v or [h; v]): the output is then read from s_t, so ∂L/∂s_t is the *total*
    derivative (the direct path through the output at t and the path through later steps), as
    the paper's ∂L/∂b_t. Otherwise (TPGN: f_t = (I ⊗ Ŝ_t) u_t is computed from the state, not part
    of it) ∂L/∂s_t counts the path through later steps only."""
    d = out.shape[-1]
    for o in range(s.shape[-1] - d + 1):
        if torch.equal(s[:, o : o + d], out):
            return o
    return None


class record:
    """Context manager: while inside, `unit` runs one step at a time through `forward_carry` (same
    outputs as its `forward` at real tokens: units are causal and right-padded) and every call is
    kept in `self.calls` with its states retaining their gradients. Both ways a model runs a unit
    are recorded: `forward(x, mask)` from the zero state, and `forward_carry(x, carry)` (the
    contiguous LM's truncated BPTT) from the zero state or the carry it is given."""

    def __init__(self, unit: nn.Module) -> None:
        check_steppable(unit)
        self.unit = unit
        self.calls: list[Recorded] = []
        self._ref = reference_path(unit)

    def _run(self, x: torch.Tensor, lengths: torch.Tensor, carry: Any = None) -> tuple[torch.Tensor, torch.Tensor, CarryLayout]:
        """Steps 1..T from the zero state (carry None) or from `carry`: (outputs, last s, layout)."""
        if carry is None:
            out, s, layout = first_step(self.unit, x[:, 0])
            start = 1
        else:
            layout = layout_of(self.unit, carry)
            s, start = layout.flatten(carry), 0
        step = step_function(self.unit, layout)
        with torch.no_grad():  # where the output sits in s (one step, not recorded)
            at = output_offset(out, s) if carry is None else output_offset(*step(s, x[:, 0]))
        read = (lambda o, s: s[:, at : at + o.shape[1]]) if at is not None else (lambda o, s: o)  # noqa: E731
        outs, states = ([read(out, s)], [s]) if carry is None else ([], [])
        for t in range(start, x.shape[1]):
            out, s = step(s, x[:, t])
            outs.append(read(out, s))
            states.append(s)
        for st in states:
            if st.requires_grad:
                st.retain_grad()
        self.calls.append(Recorded(x.detach(), lengths, states, layout))
        return torch.stack(outs, 1), states[-1], layout

    def _forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths_from_mask(x, mask)
        outs, _, _ = self._run(x, lengths)
        outputs = mask_outputs(outs, lengths)
        return outputs, last_state(outputs, lengths)

    def _forward_carry(self, x: torch.Tensor, carry: Any = None) -> tuple[torch.Tensor, Any]:
        lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.long, device=x.device)
        outs, s, layout = self._run(x, lengths, carry)
        return outs, layout.unflatten(s)

    def __enter__(self) -> record:
        self._ref.__enter__()
        self.unit.forward = self._forward  # instance attributes: found before the class's methods
        self.unit.forward_carry = self._forward_carry
        return self

    def __exit__(self, *exc: object) -> None:
        del self.unit.forward
        del self.unit.forward_carry
        self._ref.__exit__(*exc)


def jacobians(unit: nn.Module, layout: CarryLayout, s_prev: torch.Tensor, x_t: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """J = ∂s_t/∂s_{t−1} [N, D, D] for N pairs (s_{t−1} [N, D], x_t [N, d_in]): jacrev per pair, vmapped."""
    from torch.func import jacrev, vmap

    step = step_function(unit, layout)

    def one(s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return step(s.unsqueeze(0), x.unsqueeze(0))[1].squeeze(0)

    with reference_path(unit):
        return vmap(jacrev(one), chunk_size=chunk)(s_prev.detach(), x_t.detach()).detach()


def spectrum(J: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(σ_max, spectral radius) of each Jacobian [N, D, D]; float64 for the decompositions."""
    J64 = J.double()
    return torch.linalg.svdvals(J64)[:, 0], torch.linalg.eigvals(J64).abs().amax(-1)


def candidate_overlap(unit: nn.Module, x: torch.Tensor, states: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """TPRU family: ⟨b̃_t, b_{t−1}⟩/‖b_{t−1}‖² at real steps t ≥ 2 (b̃_t = R f_t, the candidate),
    and the largest filler max_n f_t,n at every real step and slice (Mod III's argument: softmax
    puts no penalty on extreme fillers); None for units without role matrices and fillers."""
    if not (hasattr(unit, "role_matrices") and hasattr(unit, "fillers") and hasattr(unit, "_slice_T")):
        return None
    with torch.no_grad(), reference_path(unit):
        mask = mask_from_lengths(lengths, x.shape[1])
        f = unit.fillers(x, mask)  # [B, T, k, N]
        _, R = unit.role_matrices()
        cand = torch.einsum("btkn,ksn->btks", f, unit._slice_T(R)).reshape(*f.shape[:2], -1)
        if getattr(unit, "tanh_candidate", False):
            cand = torch.tanh(cand)
        prev, cur = states[:, :-1], cand[:, 1:]
        proj = (cur * prev).sum(-1) / prev.pow(2).sum(-1).clamp_min(1e-12)
        return proj[mask[:, 1:]], f.amax(-1)[mask].flatten()  # proj: steps t >= 2 (their index from 1)


@dataclass
class GradientStats:
    """What `tprbench gradients` reports for one unit (means over sequences / real steps)."""

    grad_norm: np.ndarray  # [T] mean ‖∂L/∂s_t‖ over sequences with length ≥ t (t = 1..T)
    grad_count: np.ndarray  # [T] how many sequences reach t
    sigma_max: np.ndarray  # [T] mean σ_max(J_t) at step t (index 0 = t 1: NaN, no J_1)
    sigma_all: np.ndarray  # every σ_max(J_t), all real steps t ≥ 2
    radius_all: np.ndarray  # every spectral radius
    update_cos: np.ndarray  # every cos(s_t − s_{t−1}, s_{t−1})
    candidate_proj: np.ndarray | None  # every ⟨b̃_t, b_{t−1}⟩/‖b_{t−1}‖² (TPRU family)
    state_size: int
    filler_max: np.ndarray | None = None  # every max_n f_t,n (TPRU family, per real step and slice)
    extras: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float]:
        first, last = _first_last(self.grad_norm, self.grad_count)
        out = {
            "state_size": self.state_size,
            "steps": int(len(self.sigma_all)),
            "sigma_max_mean": _f(np.mean(self.sigma_all)),
            "sigma_max_median": _f(np.median(self.sigma_all)),
            "frac_sigma_gt_1": _f(np.mean(self.sigma_all > 1.0)),
            "radius_mean": _f(np.mean(self.radius_all)),
            "grad_norm_first": first,
            "grad_norm_last": last,
            "grad_ratio_first_last": first / last if last > 0 else float("nan"),
            "update_cos_mean": _f(np.mean(self.update_cos)),
            "frac_update_removes": _f(np.mean(self.update_cos < 0)),
        }
        if self.candidate_proj is not None and len(self.candidate_proj):
            out["candidate_proj_mean"] = _f(np.mean(self.candidate_proj))
            out["frac_candidate_positive"] = _f(np.mean(self.candidate_proj > 0))
        if self.filler_max is not None and len(self.filler_max):
            out["filler_max_mean"] = _f(np.mean(self.filler_max))
            out["frac_filler_max_gt_0.9"] = _f(np.mean(self.filler_max > 0.9))
        return out


def _f(x: Any) -> float:
    return float(x) if np.size(x) else float("nan")


def _first_last(norms: np.ndarray, counts: np.ndarray, min_count: int = 1) -> tuple[float, float]:
    """‖∂L/∂s_1‖ and the norm at the last step that at least a tenth of the sequences reach
    (so a handful of very long sequences does not decide the ratio)."""
    if not len(norms):
        return float("nan"), float("nan")
    enough = np.nonzero(counts >= max(min_count, counts[0] / 10))[0]
    return float(norms[0]), float(norms[enough[-1]])


def analyse(unit: nn.Module, calls: list[Recorded], max_pairs: int = 4096) -> GradientStats:
    """Statistics over recorded calls (after `backward`)."""
    T = max(len(c.states) for c in calls)
    D = calls[0].layout.size
    norm_sum, counts = np.zeros(T), np.zeros(T)
    sig_sum, sig_cnt = np.zeros(T), np.zeros(T)
    sig_all, rad_all, cos_all, cand_all, fmax_all = [], [], [], [], []
    budget = max_pairs
    for c in calls:
        S = c.stacked_states()  # [B, T, D]
        G = c.grads().detach()
        steps = S.shape[1]
        real = mask_from_lengths(c.lengths, steps)  # [B, T]
        norms = G.norm(dim=-1) * real
        norm_sum[:steps] += norms.sum(0).double().numpy()
        counts[:steps] += real.sum(0).numpy()
        if steps < 2:
            continue
        pair_real = real[:, 1:]  # step t ≥ 2 is real
        prev, cur = S[:, :-1][pair_real], S[:, 1:][pair_real]
        delta = cur - prev
        cos_all.append(torch.nn.functional.cosine_similarity(delta, prev, dim=-1, eps=1e-12).double().numpy())
        if budget > 0:
            xs = c.x[:, 1:][pair_real]
            t_index = torch.arange(1, steps).unsqueeze(0).expand_as(pair_real)[pair_real]
            take = min(budget, len(prev))
            J = jacobians(unit, c.layout, prev[:take], xs[:take])
            sig, rad = spectrum(J)
            budget -= take
            sig_all.append(sig.numpy())
            rad_all.append(rad.numpy())
            np.add.at(sig_sum, t_index[:take].numpy(), sig.numpy())
            np.add.at(sig_cnt, t_index[:take].numpy(), 1)
        got = candidate_overlap(unit, c.x, S, c.lengths)
        if got is not None:
            cand_all.append(got[0].double().numpy())
            fmax_all.append(got[1].double().numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        grad_norm = norm_sum / counts
        sigma = sig_sum / sig_cnt
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0)  # noqa: E731
    return GradientStats(
        grad_norm,
        counts,
        sigma,
        cat(sig_all),
        cat(rad_all),
        cat(cos_all),
        cat(cand_all) if cand_all else None,
        D,
        cat(fmax_all) if fmax_all else None,
    )


def state_gradients(unit: nn.Module, x: torch.Tensor, mask: torch.Tensor | None, loss_fn: Any, max_pairs: int = 4096) -> GradientStats:
    """The whole analysis for a bare unit: `loss_fn(outputs, state)` → scalar (tests, `--unit`)."""
    with record(unit) as rec:
        outputs, state = unit(x, mask)
        loss = loss_fn(outputs, state)
    loss.backward()
    return analyse(unit, rec.calls, max_pairs)


def on_batches(
    model: nn.Module, unit: nn.Module, adapter: Any, split: str, batches: int, batch_size: int, max_pairs: int, device: torch.device | str = "cpu"
) -> GradientStats | None:
    """The analysis of `unit` (a layer of `model`'s encoder) on the first `batches` batches of
    `split`: the model in eval mode (no dropout: the gradient of the function it computes), the
    task's loss backpropagated batch by batch with the unit recorded. None when the split gave no
    batches. Leaves the model in eval mode with no gradients."""
    model.eval()
    with record(unit) as rec:
        for i, batch in enumerate(adapter.eval_batches(split, batch_size)):
            if i >= batches:
                break
            with torch.enable_grad():
                loss, _ = adapter.loss(model, to_device(batch, device))
                loss.backward()
            model.zero_grad(set_to_none=True)
        calls = rec.calls
    return analyse(unit, calls, max_pairs=max_pairs) if calls else None


#: The per-epoch gradient summary the trainer logs when `grad_log_batches` > 0 (key in the
#: epoch's metrics ← key of GradientStats.summary()).
EPOCH_METRICS = {"grad_ratio_first_last": "grad_ratio_first_last", "grad_frac_sigma_gt_1": "frac_sigma_gt_1", "grad_sigma_max_mean": "sigma_max_mean"}
EPOCH_BATCH_SIZE = 32  # sequences per batch of the per-epoch summary
EPOCH_MAX_PAIRS = 256  # Jacobians per epoch (σ_max statistics): cheap next to an epoch


def first_split(split: str) -> str:
    """The first split of a validation key (`mean(a,b)` → a)."""
    if split.startswith("mean(") and split.endswith(")"):
        return split[5:-1].split(",")[0]
    return split


def epoch_summary(model: nn.Module, adapter: Any, batches: int, device: torch.device | str = "cpu", layer: int = 1) -> dict[str, float]:
    """After an epoch: the gradient-flow summary of encoder layer `layer` on the first `batches`
    validation batches (EPOCH_BATCH_SIZE sequences each): first/last ‖∂L/∂s_t‖ ratio, share of
    steps with σ_max(J_t) > 1 and mean σ_max, as `EPOCH_METRICS` keys (non-finite values left out).
    Raises CarryError / ValueError when the model's unit cannot be analysed."""
    from .readout import encoder_layers, layer_unit

    layers = encoder_layers(model)
    unit = layer_unit(layers[min(layer, len(layers)) - 1])
    stats = on_batches(model, unit, adapter, first_split(adapter.valid_split), batches, EPOCH_BATCH_SIZE, EPOCH_MAX_PAIRS, device)
    if stats is None:
        return {}
    summary = stats.summary()
    out = {key: float(summary[name]) for key, name in EPOCH_METRICS.items() if name in summary}
    return {k: v for k, v in out.items() if np.isfinite(v)}
