"""The pair architectures against the papers and the authors' code (docs/science-tasks.md,
"Pair architectures"): encoder depth, classifier width, parameter counts of workshop Table 1,
the two BiDAF attentions (the trilinear one against a loop transcription of Seo et al. 2017)."""

from __future__ import annotations

import pytest
import torch

import units
from tasks.arch_options import PairArchOptions, describe_arch
from tasks.architectures import PairModel, masked_softmax
from tasks.errors import TaskError
from tasks.registry import get_task


def logic_model(unit: str, arch: str = "plain", dim: int = 64, **options):
    task = get_task("logic")(options, "generated", "/nonexistent-cache")
    return task.build_model(unit, arch, dim, dim, task.resolve_hparams({}))


# --------------------------------------------------------------------------------------------
# Depth, widths, counts
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("unit, expected", [("lstm", 65_536), ("gru", 49_152), ("tpru-v1", 40_960)])
def test_logic_plain_counts_equal_workshop_table_1(unit, expected):
    """Workshop Table 1 (logic, plain, d = 64): LSTM 65.5k, GRU 49.1k, TPRU 2 × 20,480 (the table
    prints 40.1k, a typo: 2 × (3·64² + 2·64·64) = 40,960, 40.9k truncated as the table's GRU
    49,152 → 49.1k). Weight matrices only, two layers."""
    counts = units.model_param_counts(logic_model(unit))
    assert counts.formula == expected


def test_encoder_is_two_layers_unless_the_spec_or_the_task_says():
    assert len(logic_model("gru").encoder.layers) == 2
    assert not hasattr(logic_model("gru[layers=1]").encoder, "layers")  # the spec's own layers win
    assert len(logic_model("gru[layers=3]", layers=1).encoder.layers) == 3
    assert not hasattr(logic_model("gru", layers=1).encoder, "layers")  # the task option
    assert units.model_param_counts(logic_model("gru", layers=1)).formula == 24_576


@pytest.mark.parametrize("unit", ["gru", "gru[bidirectional=true]", "tpru[roles=8]"])
def test_classifier_hidden_width_is_d(unit):
    """The authors' classifier.py: Linear(4·d·dirs, d_hidden) → ReLU → Linear(d_hidden, classes)."""
    model = logic_model(unit, dim=32)
    first, last = model.head.mlp[0], model.head.mlp[-1]
    dirs = 2 if "bidirectional" in unit else 1
    assert (first.in_features, first.out_features) == (4 * 32 * dirs, 32)
    assert last.in_features == 32
    for layer in (first, last):  # classifier.py's init: kaiming-uniform (a = 0), zero bias
        bound = (6 / layer.in_features) ** 0.5
        assert torch.all(layer.bias == 0) and layer.weight.abs().max() <= bound
        assert layer.weight.abs().max() > 0.8 * bound


@pytest.mark.parametrize("attention, width_in", [("dot", lambda w, din: 2 * w + din), ("trilinear", lambda w, din: 4 * w)])
def test_bidaf_modelling_layer_is_one_layer_of_the_same_unit(attention, width_in):
    model = logic_model("tpru[roles=8]", "bidaf", dim=16, attention=attention)
    assert len(model.encoder.layers) == 2
    modelling = model.modelling
    assert type(modelling).__name__ == "TPRU" and modelling.roles == 8  # one layer, same unit and options
    assert modelling.input_size == width_in(16, 16)
    bi = logic_model("gru[bidirectional=true]", "bidaf", dim=16, attention=attention)
    assert bi.modelling.output_size == 32 and bi.modelling.fwd.input_size == width_in(32, 16)


def test_bidaf_modelling_unit_option():
    """TPRN_1: phrase layer of one unit, modelling layer of another (here tpru + lstm)."""
    model = logic_model("tpru[roles=8]", "bidaf", dim=16, modelling_unit="lstm[bidirectional=true]")
    assert type(model.encoder.layers[0]).__name__ == "TPRU"
    assert model.modelling.output_size == 32 and type(model.modelling.fwd).__name__ == "LSTM"
    with pytest.raises(TaskError, match="modelling_unit"):
        get_task("logic")({"modelling_unit": "lstmm"}, "generated", "/nonexistent-cache")


def test_describe_arch_names_the_bidaf():
    assert "TPRU authors' models/bidaf.py" in describe_arch("bidaf", PairArchOptions())
    assert "Seo et al. 2017" in describe_arch("bidaf", PairArchOptions(attention="trilinear"))
    assert describe_arch("plain", PairArchOptions()).startswith("plain")
    task = get_task("nli")({"attention": "trilinear"}, None, "/nonexistent-cache")
    assert "Seo" in task.report_notes("bidaf")[0]
    transfer = get_task("transfer")({}, None, "/nonexistent-cache")
    notes = transfer.report_notes("plain")
    assert notes[0].startswith("plain") and "liblinear" in notes[1]


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------
def test_masked_softmax_gives_zero_rows_not_nan():
    scores = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]]).unsqueeze(1).expand(2, 3, 4)
    out = masked_softmax(scores, mask, 2)
    assert torch.all(out[1] == 0) and torch.allclose(out[0].sum(-1), torch.ones(3))
    out.sum().backward()
    assert torch.isfinite(scores.grad).all()


def transcribe_trilinear(w: torch.Tensor, h: torch.Tensor, u: torch.Tensor, h_len: int, u_len: int) -> torch.Tensor:
    """Seo et al. (2017) §2.4 for one context h [T, w] and query u [J, w], literally, with loops."""
    width = h.shape[1]
    w_h, w_u, w_hu = w[:width], w[width : 2 * width], w[2 * width :]
    S = torch.zeros(h_len, u_len, dtype=h.dtype)
    for t in range(h_len):
        for j in range(u_len):
            S[t, j] = w_h @ h[t] + w_u @ u[j] + w_hu @ (h[t] * u[j])  # α(h, u) = wᵀ[h; u; h∘u]
    G = torch.zeros(h.shape[0], 4 * width, dtype=h.dtype)
    b = torch.softmax(S.max(1).values, 0)  # Q2C: softmax_t(max_j S_tj)
    h_tilde = sum(b[t] * h[t] for t in range(h_len))
    for t in range(h_len):
        a = torch.softmax(S[t], 0)  # C2Q: softmax_j(S_tj)
        u_tilde = sum(a[j] * u[j] for j in range(u_len))
        G[t] = torch.cat([h[t], u_tilde, h[t] * u_tilde, h[t] * h_tilde])
    return G


def test_trilinear_attention_matches_a_transcription_of_seo_et_al():
    torch.manual_seed(0)
    model = PairModel("gru", "bidaf", 10, 6, 5, classes=3, attention="trilinear").double()
    with torch.no_grad():
        model.similarity.weight.normal_()
    B, Tu, Tv, w = 3, 5, 5, 6  # both halves padded to one length, as encode_pair does
    hu, hv = torch.randn(B, Tu, w, dtype=torch.float64), torch.randn(B, Tv, w, dtype=torch.float64)
    lu, lv = [5, 3, 2], [4, 4, 1]
    mu = torch.arange(Tu) < torch.tensor(lu).unsqueeze(1)
    mv = torch.arange(Tv) < torch.tensor(lv).unsqueeze(1)
    G = model._trilinear(hu, hv, mu, mv)
    weight = model.similarity.weight.detach()[0]
    w_swapped = torch.cat([weight[w : 2 * w], weight[:w], weight[2 * w :]])  # the v side: context v, query u
    for i in range(B):
        expected_u = transcribe_trilinear(weight, hu[i], hv[i], lu[i], lv[i])
        expected_v = transcribe_trilinear(w_swapped, hv[i], hu[i], lv[i], lu[i])
        torch.testing.assert_close(G[i, : lu[i]], expected_u[: lu[i]], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(G[B + i, : lv[i]], expected_v[: lv[i]], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", ["dot", "trilinear"])
def test_bidaf_padding_is_invisible_and_gradients_reach_every_weight(attention):
    torch.manual_seed(1)
    model = PairModel("gru", "bidaf", 20, 6, 5, classes=3, attention=attention).double().eval()
    a = torch.tensor([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0]])
    b = torch.tensor([[8, 9, 0], [10, 11, 12]])
    logits = model(a, a > 0, b, b > 0)
    longer = model(torch.cat([a, torch.zeros(2, 3, dtype=torch.long)], 1), torch.cat([a, torch.zeros(2, 3, dtype=torch.long)], 1) > 0, b, b > 0)
    torch.testing.assert_close(logits, longer, rtol=1e-10, atol=1e-12)
    logits.sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []
    if attention == "trilinear":
        assert model.similarity.weight.grad.abs().sum() > 0
