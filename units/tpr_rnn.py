"""TPR-RNN (Schlag & Schmidhuber, "Learning to Reason with Third-Order Tensor Products", NeurIPS 2018).

The model has three parts; the update module is the recurrent unit `tpr3`, the other two are
plain modules the `tpr-rnn` architecture puts around it (the paper's equations):

- `SentenceEncoder` (input module): s_t = Σ_i D[w_{t,i}] ⊙ p_i over the L word slots of a
  sentence, PAD (id 0) included — it has a learned embedding and is summed in, as in the code.
- `TPR3` (update module, unit `tpr3`): five MLPs read the sentence vector s_t,
      e1, e2 = f_e1(s_t), f_e2(s_t) ∈ R^E        r1, r2, r3 = f_r1(s_t), f_r2(s_t), f_r3(s_t) ∈ R^R
  and change the order-3 memory F ∈ R^{E×R×E} (F_0 = 0), every retrieval reading F_{t−1}:
      ŵ = ret(F_{t−1}, e1, r1)   m̂ = ret(F_{t−1}, e1, r2)   b̂ = ret(F_{t−1}, e2, r3)
      W = e1⊗r1⊗(e2 − ŵ)         M = e1⊗r2⊗(ŵ − m̂)           B = e2⊗r3⊗(e1 − b̂)
      F_t = F_{t−1} + W + M + B                     with ret(F, a, ρ)_f = Σ_{e,r} a_e ρ_r F[e, r, f].
  Padded steps leave F unchanged. `ops` drops M and/or B (the paper's Table 3 ablations).
- `TPRInference` (inference module): four MLPs read the question vector s_Q,
      n = f_n(s_Q) ∈ R^E,  l_j = f_lj(s_Q) ∈ R^R;   i1 = LN1(ret(F_T, n, l1)),
      i2 = LN2(ret(F_T, i1, l2)),  i3 = LN3(ret(F_T, i2, l3)),  logits = Z (i1 + i2 + i3)
  with a *scalar* layer norm per hop (`ScalarLayerNorm`) and Z ∈ R^{V×E} onto the whole vocabulary.

MLPs are f(x) = tanh(W2 tanh(W1 x + b1) + b2), Glorot-uniform weights and zero biases (the
authors' lib.py). Sources of every choice: docs/babi.md, "TPR-RNN".

Speed: the MLPs depend only on the sentence vectors, so they run for all steps at once before
the loop (`MLPBank`: one matmul per layer for a bank of same-sized MLPs); the loop holds only the
tensor update, two batched matmuls per step (both keys against F_{t−1}, then the rank-2 update).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from . import tpru_ext
from .base import RecurrentUnit, lengths_from_mask, mask_from_lengths, mask_outputs
from .meta import TPR3_OPS, TPR3Meta
from .registry import register_unit

OPS = TPR3_OPS  # write, move, backlink (units/meta.py)
LN_EPS = 1e-7  # lib.py `norm`: (x − mean) / sqrt(var + 1e−7)


def retrieve(F: torch.Tensor, a: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """ret(F, a, ρ)_f = Σ_{e,r} a_e ρ_r F[e, r, f]: F [B,E,R,E], a [B,E], ρ [B,R] → [B,E]."""
    return torch.einsum("be,br,berf->bf", a, rho, F)


def tpr_update(
    F: torch.Tensor, e1: torch.Tensor, e2: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor | None = None, r3: torch.Tensor | None = None
) -> torch.Tensor:
    """F_t from F_{t−1}: write, plus move when r2 is given, plus backlink when r3 is given.

    All retrievals read F_{t−1} (the authors' tpr_rnn_graph.py; the paper's eq. 11/13 write F_t).
    Shapes: F [B,E,R,E], e1/e2 [B,E], r1/r2/r3 [B,R]. Zero keys (e1 = e2 = 0) leave F exactly as it is.
    """
    B, E, R, _ = F.shape
    flat = F.reshape(B, E, R * E)
    keys = torch.stack([e1, e2], 1) if r3 is not None else e1.unsqueeze(1)
    # F contracted with each entity key over its first axis, in one matmul: [B, keys, R, E]
    read = torch.bmm(keys, flat).view(B, keys.shape[1], R, E)
    by_e1_rel = torch.stack([r1, r2], 1) if r2 is not None else r1.unsqueeze(1)
    hats = torch.bmm(by_e1_rel, read[:, 0])  # ŵ (and m̂)   [B, 1|2, E]
    w_hat = hats[:, 0]
    by_e1 = r1.unsqueeze(2) * (e2 - w_hat).unsqueeze(1)  # r1 ⊗ (e2 − ŵ)      [B,R,E]
    if r2 is not None:
        by_e1 = by_e1 + r2.unsqueeze(2) * (w_hat - hats[:, 1]).unsqueeze(1)  # + r2 ⊗ (ŵ − m̂)
    if r3 is None:
        delta = e1.unsqueeze(2) * by_e1.reshape(B, 1, R * E)  # e1 ⊗ (…)
    else:
        b_hat = torch.bmm(r3.unsqueeze(1), read[:, 1]).squeeze(1)
        by_e2 = r3.unsqueeze(2) * (e1 - b_hat).unsqueeze(1)  # r3 ⊗ (e1 − b̂)
        # e1 ⊗ by_e1 + e2 ⊗ by_e2 as one [B,E,2] × [B,2,R·E] matmul
        delta = torch.bmm(keys.transpose(1, 2), torch.stack([by_e1, by_e2], 1).reshape(B, 2, R * E))
    return (flat + delta).view(B, E, R, E)


class TPR3Recurrence(torch.autograd.Function):
    """The whole update loop as one C++ op each way (units/csrc/tpr3_recurrence.cpp): F_1..F_T from
    the keys of every step, time-major e1, e2 [T,B,E], r1..r3 [T,B,R] (None: operation off), F0
    [B, E·R·E], lengths [B] (None: all T; a row's F stays after its length), T ≥ 1. Returns F_t
    [T, B, E·R·E], or with `final_only` F_T [B, E·R·E] alone (`memory`): its backward then takes
    ∂L/∂F_T without the zero-filled [T, B, E·R·E] that selecting the last step would make autograd
    build (at bAbI sizes ~40 MB a batch, measured as a third of a training step).
    The same computation as the `tpr_update` loop, tested equal to it (tests/test_tpr_rnn.py)."""

    @staticmethod
    def forward(ctx, e1, e2, r1, r2, r3, F0, lengths, final_only=False):
        empty = e1.new_empty(0)
        args = (e1, e2, r1, empty if r2 is None else r2, empty if r3 is None else r3, F0, empty.long() if lengths is None else lengths)
        outs, hats = tpru_ext.ops().tpr3_forward(*args)
        ctx.ops = (r2 is not None, r3 is not None)
        ctx.save_for_backward(*args, outs, hats)
        return outs[-1].clone() if final_only else outs

    @staticmethod
    def backward(ctx, grad_outs):
        e1, e2, r1, r2, r3, F0, lengths, outs, hats = ctx.saved_tensors
        d_e1, d_e2, d_r1, d_r2, d_r3, d_F0 = tpru_ext.ops().tpr3_backward(grad_outs, e1, e2, r1, r2, r3, F0, lengths, outs, hats)
        move, back = ctx.ops
        return d_e1, d_e2, d_r1, d_r2 if move else None, d_r3 if back else None, d_F0, None, None


def cpp_loop_available(x: torch.Tensor) -> bool:
    """The C++ update loop runs this call: CPU tensors and the extension built (else `tpr_update` in Python)."""
    return x.device.type == "cpu" and tpru_ext.ops() is not None


class MLPBank(nn.Module):
    """`count` independent MLPs f(x) = tanh(W2 tanh(W1 x + b1) + b2) of the same sizes.

    Stored stacked so that each layer is one matmul for all of them (and for all time steps);
    each network's weights are Glorot-uniform with its own fans, biases zero (lib.py `MLP`).
    """

    def __init__(self, count: int, input_size: int, hidden: int, output: int) -> None:
        super().__init__()
        self.count, self.input_size, self.hidden, self.output = count, input_size, hidden, output
        self.W1 = nn.Parameter(torch.empty(count, hidden, input_size))
        self.b1 = nn.Parameter(torch.zeros(count, hidden))
        self.W2 = nn.Parameter(torch.empty(count, output, hidden))
        self.b2 = nn.Parameter(torch.zeros(count, output))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Glorot uniform per network: bound sqrt(6 / (fan_in + fan_out)) of that network's matrix.
        # (nn.init.xavier_uniform_ on the stacked 3-d tensor would compute other fans.)
        for weight, fan_in, fan_out in ((self.W1, self.input_size, self.hidden), (self.W2, self.hidden, self.output)):
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            nn.init.uniform_(weight, -bound, bound)
        nn.init.zeros_(self.b1)
        nn.init.zeros_(self.b2)

    @staticmethod
    def params(count: int, input_size: int, hidden: int, output: int) -> int:
        return count * (input_size * hidden + hidden + hidden * output + output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[..., input_size] → [..., count, output].

        The second layer is one matmul with the block-diagonal [count·output, count·hidden] matrix
        of the networks' W2: a batched per-network product (einsum/bmm) first permutes the hidden
        activations to [count, …, hidden] (a copy of the largest tensor here) and runs `count`
        skinny products; the zeros of the block-diagonal cost less than that at these sizes."""
        hidden = torch.tanh(torch.nn.functional.linear(x, self.W1.reshape(-1, self.input_size), self.b1.reshape(-1)))
        out = torch.nn.functional.linear(hidden, torch.block_diag(*self.W2.unbind(0)), self.b2.reshape(-1))
        return torch.tanh(out).view(*x.shape[:-1], self.count, self.output)


@register_unit("tpr3")
class TPR3(RecurrentUnit, TPR3Meta):
    """TPR-RNN update module (Schlag & Schmidhuber 2018): write/move/backlink on F ∈ R^{E×R×E}."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        entity: int = 15,
        relation: int = 10,
        mlp_hidden: int = 0,
        ops: Literal["wmb", "w", "wm", "wb"] = "wmb",
    ) -> None:
        super().__init__(input_size, hidden_size)
        self.check_options(hidden_size, entity=entity, relation=relation, mlp_hidden=mlp_hidden, ops=ops)
        self.entity, self.relation, self.ops = entity, relation, ops
        self.mlp_hidden = mlp_hidden or input_size
        self.entities = MLPBank(2, input_size, self.mlp_hidden, entity)  # e1, e2
        self.relations = MLPBank(self.relation_count(ops), input_size, self.mlp_hidden, relation)  # r1 [, r2] [, r3]

    # -- options and counts ---------------------------------------------------------------------
    @staticmethod
    def relation_count(ops: str) -> int:
        """r1 always; r2 with move, r3 with backlink (an ablated operation has no MLP)."""
        return 1 + ("m" in ops) + ("b" in ops)

    # width, implied_hidden_size, check_options: TPR3Meta's (units/meta.py), read by study files without torch

    @classmethod
    def formula_params(
        cls, input_size: int, hidden_size: int, entity: int = 15, relation: int = 10, mlp_hidden: int = 0, ops: str = "wmb", **options: object
    ) -> int:
        """Every parameter of the update module, biases included: the paper counts whole models
        that way (Schlag & Schmidhuber 2018: 7,943 at task-1 sizes)."""
        hidden = mlp_hidden or input_size
        return MLPBank.params(2, input_size, hidden, entity) + MLPBank.params(cls.relation_count(ops), input_size, hidden, relation)

    # -- the equations --------------------------------------------------------------------------
    def representations(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """e1, e2 [.., E] and r1 (r2, r3 when their operation is on) [.., R] for sentence vectors x [.., S].

        Computed for all steps at once (they depend only on x); also what the paper's §7 clusters."""
        e = self.entities(x)
        r = self.relations(x)
        out = {"e1": e[..., 0, :], "e2": e[..., 1, :], "r1": r[..., 0, :]}
        k = 1
        if "m" in self.ops:
            out["r2"] = r[..., k, :]
            k += 1
        if "b" in self.ops:
            out["r3"] = r[..., k, :]
        return out

    def _time_major_representations(self, x: torch.Tensor, lengths: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """`representations` of the real tokens only, placed time-major [T, B, ·] with zeros at padding.

        The MLPs are most of a step's arithmetic, and the C++ loop ignores the keys of padded steps
        (F stays there, their gradient is 0): a padded batch (logic pairs: a third padding) need
        not compute them. Real tokens are gathered from x as stored and scattered straight into
        time-major order, so no transposed copy of x or of the keys is made."""
        B, T, S = x.shape
        if lengths is None or bool((lengths >= T).all()):
            return {k: v.transpose(0, 1) for k, v in self.representations(x).items()}
        real = mask_from_lengths(lengths, T)  # [B, T]
        where = real.reshape(-1).nonzero().squeeze(1)  # batch-major positions b·T + t
        to = (where % T) * B + where // T  # the same positions time-major: t·B + b
        reps = self.representations(x.reshape(B * T, S).index_select(0, where))
        return {k: v.new_zeros(T * B, v.shape[-1]).index_copy(0, to, v).view(T, B, -1) for k, v in reps.items()}

    def _run(
        self, x: torch.Tensor, lengths: torch.Tensor | None, F: torch.Tensor | None, keep_outputs: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """F after every step (when asked: [B, T, E·R·E]) and F at the end [B, E, R, E]."""
        B, T, _ = x.shape
        E, R = self.entity, self.relation
        if F is None:
            F = x.new_zeros(B, E, R, E)
        if cpp_loop_available(x):  # the C++ loop: padded steps are skipped there (F stays, no gradient)
            if not T:
                return (x.new_zeros(B, 0, E * R * E) if keep_outputs else None), F
            time_major = self._time_major_representations(x, lengths)
            keys = (time_major["e1"], time_major["e2"], time_major["r1"], time_major.get("r2"), time_major.get("r3"))
            if not keep_outputs:
                return None, TPR3Recurrence.apply(*keys, F.reshape(B, E * R * E), lengths, True).view(B, E, R, E)
            outs = TPR3Recurrence.apply(*keys, F.reshape(B, E * R * E), lengths)
            return outs.transpose(0, 1), outs[-1].view(B, E, R, E)
        reps = self.representations(x)
        steps = T
        if lengths is not None:
            # Zero keys at padded steps make ΔF exactly 0, so F stays bit for bit (`tpr_update`); done
            # once on the small [B,T,·] tensors with `where`, so even inf/NaN at padding cannot leak.
            real = mask_from_lengths(lengths, T).unsqueeze(-1)
            reps = {k: torch.where(real, v, torch.zeros((), dtype=v.dtype, device=v.device)) for k, v in reps.items()}
            steps = int(lengths.max().item()) if B else 0
        # unbind, not [:, t]: one backward node for all steps instead of a zero-filled [B,T,·] per step
        e1, e2, r1 = reps["e1"].unbind(1), reps["e2"].unbind(1), reps["r1"].unbind(1)
        r2 = reps["r2"].unbind(1) if "r2" in reps else None
        r3 = reps["r3"].unbind(1) if "r3" in reps else None
        outputs = []
        for t in range(steps):
            F = tpr_update(F, e1[t], e2[t], r1[t], None if r2 is None else r2[t], None if r3 is None else r3[t])
            if keep_outputs:
                outputs.append(F.reshape(B, -1))
        if not keep_outputs:
            return None, F
        if steps < T:  # steps past every sequence's end: outputs there are zero (masked by the caller)
            outputs.extend([x.new_zeros(B, E * R * E)] * (T - steps))
        return (torch.stack(outputs, 1) if outputs else x.new_zeros(B, T, E * R * E)), F

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """outputs vec(F_t) [B, T, E·R·E] (zero at padding), state vec(F_T) [B, E·R·E].

        Materialises F after every step (the unit interface asks for it): at all-task sizes that is
        162k floats per step and example; the architecture calls `memory` instead."""
        lengths = lengths_from_mask(x, mask)
        outputs, F = self._run(x, lengths, None, keep_outputs=True)
        return mask_outputs(outputs, lengths), F.reshape(x.shape[0], -1)

    def memory(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """F_T [B, E, R, E] after each sequence's last real step, without per-step outputs.

        Packed like torch's PackedSequence: the batch is sorted by length and step t updates only
        the sequences still running, so a batch costs Σ lengths rather than B · max length (bAbI
        stories of the long tasks average a third of their batch's longest)."""
        lengths = lengths_from_mask(x, mask)
        B, E, R = x.shape[0], self.entity, self.relation
        if cpp_loop_available(x):  # the C++ loop skips each row's padded steps itself: no sorting needed
            return self._run(x, lengths, None, keep_outputs=False)[1]
        if lengths is None:
            lengths = torch.full((B,), x.shape[1], dtype=torch.long, device=x.device)
        lengths, order = torch.sort(lengths, descending=True, stable=True)
        x = x[order]
        reps = self.representations(x)
        e1, e2, r1 = reps["e1"].unbind(1), reps["e2"].unbind(1), reps["r1"].unbind(1)
        r2 = reps["r2"].unbind(1) if "r2" in reps else None
        r3 = reps["r3"].unbind(1) if "r3" in reps else None
        running = [int(n) for n in (lengths.unsqueeze(0) > torch.arange(x.shape[1], device=x.device).unsqueeze(1)).sum(1).tolist()]
        F = x.new_zeros(B, E, R, E)
        done = []  # finished rows, shortest first
        for t, n in enumerate(running):
            if n == 0:
                break
            if n < F.shape[0]:
                done.append(F[n:])
                F = F[:n]
            F = tpr_update(F, e1[t][:n], e2[t][:n], r1[t][:n], None if r2 is None else r2[t][:n], None if r3 is None else r3[t][:n])
        F = torch.cat([F, *reversed(done)]) if done else F
        return F[torch.argsort(order)]

    def forward_carry(self, x: torch.Tensor, carry: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Unpadded x continuing from the memory `carry` [B, E, R, E] (None = F_0 = 0)."""
        outputs, F = self._run(x, None, carry, keep_outputs=True)
        return outputs, F

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, entity={self.entity}, relation={self.relation}, mlp_hidden={self.mlp_hidden}, ops={self.ops}"


class SentenceEncoder(nn.Module):
    """The input module: s = Σ_{i=1..L} D[w_i] ⊙ p_i over a sentence's L word slots.

    Token ids [..., L'] (L' ≤ L, right-padded with PAD = 0) → [..., symbol_size]. Slots beyond L'
    are PAD: PAD has a learned embedding and is summed in (authors' code), so a sentence's vector
    does not depend on how wide its id tensor happens to be. Positions are stored as P (init 1)
    and used as P / L (the code's `ones_init() / max_sentence_length`).
    """

    def __init__(self, vocab_size: int, symbol_size: int, max_words: int, init_limit: float = 0.01) -> None:
        super().__init__()
        if min(vocab_size, symbol_size, max_words) < 1:
            raise ValueError(f"sizes must be positive, got vocab_size={vocab_size}, symbol_size={symbol_size}, max_words={max_words}")
        self.vocab_size, self.symbol_size, self.max_words, self.init_limit = vocab_size, symbol_size, max_words, init_limit
        self.embedding = nn.Parameter(torch.empty(vocab_size, symbol_size))  # D
        self.positions = nn.Parameter(torch.ones(max_words, symbol_size))  # P; p_i = P_i / L
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.embedding, -self.init_limit, self.init_limit)
        nn.init.ones_(self.positions)

    @staticmethod
    def params(vocab_size: int, symbol_size: int, max_words: int) -> int:
        return vocab_size * symbol_size + max_words * symbol_size

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        width = ids.shape[-1]
        if width > self.max_words:
            raise ValueError(f"sentences have {width} word slots, more than max_words={self.max_words} of the encoder")
        if width < self.max_words:
            ids = torch.nn.functional.pad(ids, (0, self.max_words - width))  # PAD = 0, summed in like any slot
        words = self.embedding[ids.long()]  # [..., L, S]
        return torch.einsum("...ls,ls->...s", words, self.positions / self.max_words)


class ScalarLayerNorm(nn.Module):
    """g·(x − mean)/sqrt(var + 1e−7) + b over the last axis, with one scalar g (init 1) and b (init 0).

    Not torch's LayerNorm, whose gain and bias are per feature: lib.py `norm` makes them shape [1]."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(()))
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)  # tf.nn.moments: the population variance
        return self.gain * (x - mean) / torch.sqrt(var + LN_EPS) + self.bias


class TPRInference(nn.Module):
    """The inference module: three hops through F_T from the question vector, then Z onto the vocabulary.

    forward(question [B, S], F [B, E, R, E]) → logits [B, vocab_size] (softmax/CE left to the loss).
    Four MLPs (n and l1..l3): the code builds a fifth (q_e2) that nothing reads; it is left out."""

    hops = 3

    def __init__(self, input_size: int, entity: int, relation: int, vocab_size: int, mlp_hidden: int = 0) -> None:
        super().__init__()
        self.input_size, self.entity, self.relation, self.vocab_size = input_size, entity, relation, vocab_size
        self.mlp_hidden = mlp_hidden or input_size
        self.query_entity = MLPBank(1, input_size, self.mlp_hidden, entity)  # n
        self.query_relations = MLPBank(self.hops, input_size, self.mlp_hidden, relation)  # l1, l2, l3
        self.norms = nn.ModuleList(ScalarLayerNorm() for _ in range(self.hops))
        self.Z = nn.Parameter(torch.empty(vocab_size, entity))
        bound = math.sqrt(6.0 / (entity + vocab_size))  # Glorot uniform (lib.py uniform_glorot_init)
        nn.init.uniform_(self.Z, -bound, bound)

    @classmethod
    def params(cls, input_size: int, entity: int, relation: int, vocab_size: int, mlp_hidden: int = 0) -> int:
        hidden = mlp_hidden or input_size
        return (
            MLPBank.params(1, input_size, hidden, entity)
            + MLPBank.params(cls.hops, input_size, hidden, relation)
            + 2 * cls.hops
            + vocab_size * entity
        )

    def forward(self, question: torch.Tensor, F: torch.Tensor, return_hops: bool = False):
        key = self.query_entity(question)[:, 0]  # n     [B, E]
        relations = self.query_relations(question)  # l1..3 [B, 3, R]
        hops = []
        for j, norm in enumerate(self.norms):
            key = norm(retrieve(F, key, relations[:, j]))  # i_{j+1} = LN(ret(F, i_j, l_{j+1})), i_0 = n
            hops.append(key)
        logits = torch.stack(hops, 0).sum(0) @ self.Z.T  # Z (i1 + i2 + i3)
        return (logits, hops) if return_hops else logits


def tpr_rnn_params(vocab_size: int, symbol_size: int, max_words: int, entity: int, relation: int, mlp_hidden: int = 0, ops: str = "wmb") -> int:
    """Trainable parameters of the whole TPR-RNN (input + update + inference module + Z):
    V·S + L·S + 3(SH+H+HE+E) + 6(SH+H+HR+R) + 6 + E·V with all three operations."""
    return (
        SentenceEncoder.params(vocab_size, symbol_size, max_words)
        + TPR3.formula_params(symbol_size, TPR3.width(entity, relation), entity=entity, relation=relation, mlp_hidden=mlp_hidden, ops=ops)
        + TPRInference.params(symbol_size, entity, relation, vocab_size, mlp_hidden)
    )
