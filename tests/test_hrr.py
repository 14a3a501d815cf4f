"""tasks/lm/hrr.py against Luo et al.'s equations (as the authors' code j-luo93/lingvo computes them), transcribed
independently.

The transcription writes circular convolution and correlation as the direct index sums and
builds every word's fillers explicitly; it never calls the module's helpers (`bound_basis`,
`decode`, `filler_embeddings`) nor units.binding.
"""

from __future__ import annotations

import math

import pytest
import torch

from tasks.lm.hrr import HRRWordEmbedding

V, D, N, DP = 11, 8, 2, 3


def conv(x, y):  # (x ⊛ y)_j = Σ_k x_k y_{(j−k) mod d}
    d = x.shape[-1]
    return torch.stack([sum(x[k] * y[(j - k) % d] for k in range(d)) for j in range(d)])


def corr(x, y):  # (x ⊕ y)_j = Σ_k x_k y_{(j+k) mod d}
    d = x.shape[-1]
    return torch.stack([sum(x[k] * y[(j + k) % d] for k in range(d)) for j in range(d)])


def _emb(**kw) -> HRRWordEmbedding:
    torch.manual_seed(kw.pop("seed", 0))
    opts = dict(vocab_size=V, dim=D, fillers=DP, roles=N, basis_seed=3)
    opts.update(kw)
    emb = HRRWordEmbedding(**opts).double()
    with torch.no_grad():  # coefficients of order one, so every term matters in the comparisons
        emb.coefficients.normal_()
    return emb


def transcribe_embedding(emb, w: int) -> torch.Tensor:
    s, r, Fb = emb.coefficients.detach(), emb.role_basis.detach(), emb.filler_basis.detach()
    total = torch.zeros(D, dtype=torch.float64)
    for i in range(emb.roles):
        filler = sum(s[w, i, k] * Fb[i, k] for k in range(emb.fillers))  # Ẽ_i(w) = F_i s_i^w
        total = total + conv(r[i], filler)  # r_i ⊛ Ẽ_i(w)
    return total


def transcribe_logits(emb, h: torch.Tensor, alphas: list[float]) -> torch.Tensor:
    s, r, Fb = emb.coefficients.detach(), emb.role_basis.detach(), emb.filler_basis.detach()
    out = torch.zeros(emb.vocab_size, dtype=torch.float64)
    for w in range(emb.vocab_size):
        for i in range(emb.roles):
            f_i = corr(r[i], h)  # f_i = r_i ⊕ h
            filler = sum(s[w, i, k] * Fb[i, k] for k in range(emb.fillers))
            out[w] += alphas[i] * torch.dot(f_i, filler)
        if emb.bias is not None:
            out[w] += emb.bias.detach()[w]
    return out


# the equations ------------------------------------------------------------------------------
@pytest.mark.parametrize("basis", ["fixed", "isometric"])
def test_embedding_and_logits_match_transcription(basis):
    emb = _emb(basis=basis, anneal_steps=10).eval()
    ids = torch.tensor([[0, 3, 10], [7, 7, 1]])
    out = emb.embed(ids)
    assert out.shape == (2, 3, D)
    for b in range(2):
        for t in range(3):
            torch.testing.assert_close(out[b, t], transcribe_embedding(emb, int(ids[b, t])), rtol=0, atol=1e-12)
    h = torch.randn(2, D, dtype=torch.float64)
    for step in (0, 4, 10, 25):
        logits = emb.logits(h, step=step)
        a = min(step, 10) / 10
        for b in range(2):
            torch.testing.assert_close(logits[b], transcribe_logits(emb, h[b], [1.0, a]), rtol=0, atol=1e-12)
    assert emb.forward(ids).equal(out)


# (f) the degenerate case is a plain factorised tied LM ----------------------------------------
def test_one_role_delta_role_is_a_plain_factorised_tied_lm():
    emb = _emb(roles=1, anneal_steps=3000, filler_dropout=0.5).train()
    with torch.no_grad():
        emb.role_basis.zero_()
        emb.role_basis[0, 0] = 1.0  # r = δ_0: r ⊛ x = x and r ⊕ x = x
        emb.bias.normal_()
    F0, s = emb.filler_basis[0], emb.coefficients[:, 0]  # [d', d], [V, d']
    ids = torch.tensor([4, 0, 9])
    torch.testing.assert_close(emb.embed(ids), s[ids] @ F0, rtol=0, atol=1e-12)  # E(w) = F s^w
    emb.eval()  # no filler dropout
    h = torch.randn(5, D, dtype=torch.float64)
    plain = h @ (s @ F0).T + emb.bias  # h·F s^w + b_w
    torch.testing.assert_close(emb.logits(h), plain, rtol=0, atol=1e-12)
    assert emb.anneal_steps == () and torch.equal(emb.alphas(0), torch.ones(1, dtype=torch.float64))


# (g) annealing ---------------------------------------------------------------------------------
def test_annealing_values_at_0_half_and_T():
    emb = _emb(anneal_steps=3000)
    assert emb.alphas(0).tolist() == [1.0, 0.0]
    assert emb.alphas(1500).tolist() == [1.0, 0.5]
    assert emb.alphas(3000).tolist() == [1.0, 1.0]
    assert emb.alphas(10_000).tolist() == [1.0, 1.0]
    four = _emb(roles=4, anneal_steps=[3000, 4000, 5000])  # the authors' 4-role schedule
    torch.testing.assert_close(four.alphas(2000), torch.tensor([1.0, 2 / 3, 0.5, 0.4], dtype=torch.float64))
    assert four.alphas(5000).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_annealed_role_is_silent_at_step_0_and_the_bias_is_dropped():
    emb = _emb(anneal_steps=100).eval()
    assert emb.bias is None  # the code adds no b_w when it anneals
    h = torch.randn(3, D, dtype=torch.float64)
    before = emb.logits(h, step=0)
    with torch.no_grad():
        emb.coefficients[:, 1].normal_()  # change only role 2's coefficients
    torch.testing.assert_close(emb.logits(h, step=0), before, rtol=0, atol=0)
    assert not torch.allclose(emb.logits(h, step=50), before)
    assert _emb(anneal_steps=0).bias is not None  # annealing off: b_w as in the paper's score


def test_step_counter_counts_training_readouts_only():
    emb = _emb(anneal_steps=4, filler_dropout=0.0)
    h = torch.randn(2, D, dtype=torch.float64)
    emb.train()
    seen = []
    for _ in range(6):
        seen.append(emb.alphas()[1].item())
        emb.logits(h)
    assert seen == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0] and int(emb.step) == 6
    emb.eval()
    emb.logits(h)
    emb.train()
    emb.logits(h, step=2)  # an explicit step neither reads nor advances the counter
    assert int(emb.step) == 6
    state = emb.state_dict()
    assert int(state["step"]) == 6  # resumes from checkpoints


def test_bad_anneal_schedules():
    with pytest.raises(ValueError, match=r"3 values"):
        _emb(roles=4, anneal_steps=3000)
    with pytest.raises(ValueError, match=r"need 1 positive"):
        _emb(anneal_steps=[10, 20])
    with pytest.raises(ValueError, match=">= 0"):
        _emb(anneal_steps=-1)


# (h) bases and parameter counts ------------------------------------------------------------------
def test_fixed_bases_receive_no_gradient_and_are_saved():
    emb = _emb(basis="fixed").train()
    assert {n for n, _ in emb.named_parameters()} == {"coefficients"}  # annealing on: no bias
    ids = torch.tensor([[1, 2, 3]])
    loss = emb.embed(ids).pow(2).sum() + emb.logits(torch.randn(4, D, dtype=torch.float64)).pow(2).sum()
    loss.backward()
    assert emb.coefficients.grad is not None and emb.coefficients.grad.abs().sum() > 0
    assert not emb.role_basis.requires_grad and emb.role_basis.grad is None
    assert not emb.filler_basis.requires_grad and emb.filler_basis.grad is None
    assert {"role_basis", "filler_basis", "coefficients", "step"} <= set(emb.state_dict())
    assert emb.aux_loss.item() == 0.0
    # N(0, 1/d) entries, reproducible from the seed
    big = HRRWordEmbedding(5, 400, fillers=100, basis_seed=1)
    assert abs(big.filler_basis.std().item() - 1 / math.sqrt(400)) < 0.02 / math.sqrt(400)
    assert torch.equal(big.role_basis, HRRWordEmbedding(5, 400, fillers=100, basis_seed=1).role_basis)


def test_isometric_bases_train_and_set_the_weighted_loss():
    emb = _emb(basis="isometric", beta=7.0).train()
    emb.embed(torch.tensor([1]))
    torch.testing.assert_close(emb.aux_loss, 7.0 * emb.isometry_loss())
    emb.aux_loss.backward()
    assert emb.filler_basis.grad.abs().sum() > 0 and emb.role_basis.grad.abs().sum() > 0
    emb.eval()
    emb.embed(torch.tensor([1]))
    assert emb.aux_loss.item() == 0.0  # a training regulariser only


def test_isometry_loss_by_hand():
    emb = _emb(basis="isometric", roles=2, fillers=2)
    with torch.no_grad():
        emb.filler_basis.zero_()
        emb.filler_basis[0, 0, 0] = emb.filler_basis[0, 1, 1] = 1.0
        emb.filler_basis[1, 0, 2] = emb.filler_basis[1, 1, 3] = 1.0  # 4 orthonormal basis fillers
        emb.role_basis.zero_()
        emb.role_basis[0, 4] = emb.role_basis[1, 5] = 1.0
    assert emb.isometry_loss().item() == 0.0
    with torch.no_grad():
        emb.filler_basis[1, 1] = emb.filler_basis[0, 0]  # a cross-role duplicate: off-diagonal 1 twice
        emb.role_basis[1] *= 2  # ‖r_2‖² = 4: (4 − 1)²
    assert emb.isometry_loss().item() == pytest.approx(2.0 + 9.0)
    one = _emb(basis="isometric", roles=1, fillers=2)
    with torch.no_grad():
        one.filler_basis.zero_()
        one.filler_basis[0, 0, 0] = one.filler_basis[0, 1, 1] = 1.0
        one.role_basis.fill_(5.0)  # no R term with one role (lingvo: `if nr > 1`)
    assert one.isometry_loss().item() == 0.0


def test_orthonormal_start_is_isometric_and_its_loss_zero():
    """basis_init="orthonormal" (a deviation from the authors' U(±0.05)): R Rᵀ = I, the Gram of all N·d'
    basis fillers = I, so the isometry loss and its weighted aux loss are 0 at step 0 (the paper's d' = 320,
    N·d' = 640 <= d = 650 included); the bases still train; the coefficients are drawn as before."""
    for dim, fillers in ((8, 4), (650, 320)):
        torch.manual_seed(0)
        emb = HRRWordEmbedding(20, dim, fillers=fillers, roles=2, basis="isometric", basis_init="orthonormal").train()
        R, F = emb.role_basis.detach().double(), emb.filler_basis.detach().double().reshape(2 * fillers, dim)
        torch.testing.assert_close(R @ R.T, torch.eye(2, dtype=torch.float64), atol=1e-5, rtol=0)
        torch.testing.assert_close(F @ F.T, torch.eye(2 * fillers, dtype=torch.float64), atol=1e-5, rtol=0)
        assert emb.isometry_loss().item() < 1e-8
        emb.embed(torch.tensor([[1, 2]]))
        assert emb.aux_loss.item() < 1e-6  # β = 100 × ~0
        assert emb.role_basis.requires_grad and emb.filler_basis.requires_grad
    torch.manual_seed(0)
    uniform = HRRWordEmbedding(20, 8, fillers=4, roles=2, basis="isometric")
    torch.manual_seed(0)
    ortho = HRRWordEmbedding(20, 8, fillers=4, roles=2, basis="isometric", basis_init="orthonormal")
    assert torch.equal(uniform.coefficients, ortho.coefficients)  # drawn first, unchanged
    assert uniform.isometry_loss().item() > 1.0  # the authors' start: far from isometric
    assert "basis_init=orthonormal" in repr(ortho) and "basis_init" not in repr(uniform)


def test_orthonormal_start_is_for_trained_bases_only():
    with pytest.raises(ValueError, match="isometric"):
        HRRWordEmbedding(V, 8, fillers=3, basis="fixed", basis_init="orthonormal")
    with pytest.raises(ValueError, match="basis_init"):
        HRRWordEmbedding(V, 8, fillers=3, basis="isometric", basis_init="gaussian")


def test_isometric_needs_n_times_dprime_at_most_d():
    with pytest.raises(ValueError, match=r"N·d' <= d.*roles=2 × fillers=5 = 10 > dim=8"):
        HRRWordEmbedding(V, 8, fillers=5, roles=2, basis="isometric")
    HRRWordEmbedding(V, 8, fillers=4, roles=2, basis="isometric")
    HRRWordEmbedding(V, 8, fillers=5, roles=2, basis="fixed")  # fixed bases need no isometry


def test_parameter_counts():
    ptb_big = HRRWordEmbedding(10_000, 650, fillers=320, roles=2, anneal_steps=3000)
    counts = ptb_big.param_counts()
    assert (counts.formula, counts.plain, counts.total) == (6_400_000, 6_500_000, 6_400_000)  # V·N·d' = 6.40M vs V·d = 6.50M
    iso = HRRWordEmbedding(10_000, 200, fillers=100, roles=2, basis="isometric").param_counts()
    assert iso.formula == 10_000 * 200 + 2 * 100 * 200 + 2 * 200 == iso.total
    no_anneal = HRRWordEmbedding(100, 20, fillers=5, roles=2, anneal_steps=0).param_counts()
    assert no_anneal.total == no_anneal.formula + 100  # + b_w


# the code-only filler dropout ------------------------------------------------------------------
def test_filler_dropout_acts_on_decoded_fillers_in_training_only():
    emb = _emb(filler_dropout=0.5, anneal_steps=0)
    seen = []
    emb.filler_dropout.register_forward_hook(lambda m, inp, out: seen.append((inp[0].detach().clone(), out.detach().clone())))
    h = torch.randn(3, D, dtype=torch.float64)
    emb.train()
    emb.logits(h)
    (f_in, f_out) = seen[-1]
    assert f_in.shape == (3, N, D)  # the decoded f_i = r_i ⊕ h, one per role
    for b in range(3):
        for i in range(N):
            torch.testing.assert_close(f_in[b, i], corr(emb.role_basis[i].detach(), h[b]), rtol=0, atol=1e-12)
    dropped = f_out == 0
    assert dropped.any() and (~dropped).any()
    torch.testing.assert_close(f_out[~dropped], 2 * f_in[~dropped])
    emb.eval()
    emb.logits(h)
    assert torch.equal(seen[-1][0], seen[-1][1])


class _EmbedAndRead(torch.nn.Module):
    """Both halves in one forward, so functional_call can swap in gradcheck's parameters."""

    def __init__(self, emb: HRRWordEmbedding) -> None:
        super().__init__()
        self.emb = emb

    def forward(self, ids, h):
        e = self.emb.embed(ids)
        return e, self.emb.aux_loss, self.emb.logits(h, step=5)


def test_gradcheck_embedding_and_readout():
    wrapper = _EmbedAndRead(_emb(basis="isometric", anneal_steps=10, filler_dropout=0.0).train())
    names = [n for n, _ in wrapper.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for _, p in wrapper.named_parameters())
    ids = torch.tensor([[2, 5], [9, 2]])
    h = torch.randn(2, D, dtype=torch.float64, requires_grad=True)

    def f(h, *ps):
        return torch.func.functional_call(wrapper, dict(zip(names, ps, strict=True)), (ids, h))

    assert torch.autograd.gradcheck(f, (h, *params), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_readout_needs_dim_wide_input():
    with pytest.raises(ValueError, match="project the unit output"):
        _emb().logits(torch.zeros(2, D + 1, dtype=torch.float64))


def test_plugs_into_a_unit_language_model():
    """Embedding → any unit (here TPRN, whose quantisation loss adds to the isometry loss) →
    projection to d → HRR readout: learns a short periodic text, the way the lm adapter will use it."""
    import units

    torch.manual_seed(0)
    vocab, d = 12, 16
    emb = HRRWordEmbedding(vocab, d, fillers=4, roles=2, basis="isometric", beta=0.01, anneal_steps=20, filler_dropout=0.1)
    unit = units.build("tprn[symbols=6,roles=3,role_dim=4,quantization=0.001]", d, 8)
    project = torch.nn.Linear(unit.output_size, d)
    model = torch.nn.ModuleList([emb, unit, project])
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    text = torch.arange(vocab).repeat(4).unsqueeze(0)  # 0 1 … 11 0 1 … : next token is determined
    losses = []
    for _ in range(60):
        out, _ = unit.forward_carry(emb(text[:, :-1]))
        ce = torch.nn.functional.cross_entropy(emb.logits(project(out)).reshape(-1, vocab), text[:, 1:].reshape(-1))
        aux = sum(m.aux_loss for m in model.modules() if torch.is_tensor(getattr(m, "aux_loss", None)))
        opt.zero_grad()
        (ce + aux).backward()
        opt.step()
        losses.append(ce.item())
    assert int(emb.step) == 60 and emb.alphas()[1].item() == 1.0
    assert losses[-1] < 0.2 * losses[0], losses[::10]
