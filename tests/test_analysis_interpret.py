"""The interpretation pieces: role/tag agreement (NMI, purity, probe, PMI table) on synthetic data,
CoNLL-U reading, OOV accounting, per-unit readouts and the whole `evaluate` on a tiny model."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import units
from harness.analysis import interpret as ip
from harness.analysis.sources import AnalysisError
from tasks.analysis import probe
from tasks.analysis.conllu import read_conllu
from tasks.analysis.readout import interface_of, read_unit
from tasks.errors import DataError

TAGS = ["DET", "NOUN", "VERB", "ADJ", "ADP"]


def _synthetic(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    tags = rng.choice(TAGS, size=n)
    return rng, tags


def test_roles_that_are_a_function_of_the_tag_give_nmi_1_and_a_perfect_probe():
    rng, tags = _synthetic()
    role_of = {t: i * 3 + 1 for i, t in enumerate(TAGS)}
    roles = np.array([role_of[t] for t in tags])
    assert probe.nmi(roles, tags) == pytest.approx(1.0)
    assert probe.purity(roles, tags) == pytest.approx(1.0)
    onehot = np.eye(len(TAGS))[[TAGS.index(t) for t in tags]] + 0.01 * rng.standard_normal((len(tags), len(TAGS)))
    half = len(tags) // 2
    assert probe.probe_accuracy(onehot[:half], tags[:half], onehot[half:], tags[half:]) == 1.0


def test_random_roles_give_nmi_near_0():
    rng, tags = _synthetic(n=20000)
    roles = rng.integers(0, 8, size=len(tags))
    assert probe.nmi(roles, tags) < 0.01
    noise = rng.standard_normal((len(tags), 6))
    half = len(tags) // 2
    majority = max(np.mean(tags[half:] == t) for t in TAGS)
    assert probe.probe_accuracy(noise[:half], tags[:half], noise[half:], tags[half:]) < majority + 0.03


def test_purity_and_role_table_by_hand():
    roles = [0, 0, 0, 1, 1, 2]
    tags = ["DET", "DET", "NOUN", "VERB", "VERB", "NOUN"]
    assert probe.purity(roles, tags) == pytest.approx(5 / 6)
    table = probe.role_table(roles, tags, top=2)
    assert [r.role for r in table] == [0, 1, 2]
    (tag, p, pmi), second = table[0].top
    assert tag == "DET" and p == pytest.approx(2 / 3)
    assert pmi == pytest.approx(np.log2((2 / 3) / (2 / 6)))
    assert second[0] == "NOUN"
    assert table[1].top[0][2] == pytest.approx(np.log2(1 / (2 / 6)))


def test_cluster_recovers_separated_groups():
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 5)) * 10
    labels = rng.integers(0, 4, size=400)
    X = centres[labels] + rng.standard_normal((400, 5)) * 0.1
    assert probe.nmi(probe.cluster(X, 4), labels) == pytest.approx(1.0)


CONLLU = """# sent_id = s1
# text = I'm in the bank .
1-2	I'm	_	_	_	_	_	_	_	_
1	I	I	PRON	PRP	_	4	nsubj	_	_
2	'm	be	AUX	VBP	_	4	cop	_	_
3	in	in	ADP	IN	_	5	case	_	_
4	the	the	DET	DT	_	5	det	_	_
5	bank	bank	NOUN	NN	_	0	root	_	_
5.1	is	be	VERB	VBZ	_	_	_	_	CopyOf=2
6	.	.	PUNCT	.	_	5	punct	_	_

# sent_id = s2
1	Zyzzyva	zyzzyva	PROPN	NNP	_	0	root	_	_

"""


def test_conllu_skips_multiword_and_empty_tokens(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    bank = read_conllu(path)
    assert [s.sent_id for s in bank.sentences] == ["s1", "s2"]
    s = bank.sentences[0]
    assert s.forms == ["I", "'m", "in", "the", "bank", "."]
    assert s.upos == ["PRON", "AUX", "ADP", "DET", "NOUN", "PUNCT"]
    assert s.xpos[4] == "NN" and s.lemmas[1] == "be"
    assert s.text == "I'm in the bank ."
    assert (bank.skipped_multiword, bank.skipped_empty) == (1, 1)
    assert bank.tokens == 7


def test_conllu_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_text("# sent_id = a\n1\tword\tword\tNOUN\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.conllu:2: .*10 tab-separated fields, found 4"):
        read_conllu(path)
    with pytest.raises(DataError, match="not found"):
        read_conllu(tmp_path / "missing.conllu")


def _adapter(words):
    itos = ["<pad>", "<unk>", *words]
    return SimpleNamespace(name="nli", vocab=SimpleNamespace(stoi={w: i for i, w in enumerate(itos)}, itos=itos))


def test_map_treebank_reports_oov(tmp_path):
    for split in ("dev", "test"):
        (tmp_path / ip.TREEBANK_FILES[split]).write_text(CONLLU, encoding="utf-8")
    tokens = ip.map_treebank(_adapter(["i", "in", "the", "bank", "."]), tmp_path, "upos")
    # 'm and Zyzzyva are unknown: 2 of 7 tokens per split, 2 of 7 word types
    assert tokens.oov_rate() == pytest.approx(2 / 7)
    assert tokens.oov_type_rate() == pytest.approx(2 / 7)
    assert tokens.ids["dev"][0] == [2, 1, 3, 4, 5, 6]
    assert tokens.known["dev"].tolist() == [True, False, True, True, True, True, False]
    with pytest.raises(AnalysisError, match="no word vocabulary"):
        ip.map_treebank(SimpleNamespace(name="logic"), tmp_path, "upos")


@pytest.mark.parametrize(
    "spec,interface",
    [
        ("tpru[roles=5]", "fillers"),
        ("tpru[roles=4,slices=2]", "fillers"),
        ("tprn[symbols=5,roles=3,role_dim=2]", "attention"),
        ("tpgn", "unbinding"),
        ("gru", "states"),
        ("lstm", "states"),
    ],
)
def test_readout_through_each_units_interface(spec, interface):
    torch.manual_seed(0)
    unit = units.build(spec, 3, 4)
    assert interface_of(unit) == interface
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)
    r = read_unit(unit, x, mask)
    assert r.interface == interface and r.features.shape[:2] == (2, 5)
    if interface in ("fillers", "attention"):
        k = 2 if "slices=2" in spec else 1
        assert r.roles.shape == (2, 5, k)
        assert int(r.roles.max()) < (3 if interface == "attention" else 5)
    else:
        assert r.roles is None


class _TinyModel(torch.nn.Module):
    def __init__(self, spec, vocab, d=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.encoder = units.build(spec + ("" if "layers" in spec else ""), d, d)


def test_evaluate_on_a_tiny_model(tmp_path):
    """Whole path: treebank → readings → metrics, for a TPRU (roles) and a GRU (k-means)."""
    for split in ("dev", "test"):
        (tmp_path / ip.TREEBANK_FILES[split]).write_text(CONLLU * 20, encoding="utf-8")
    tokens = ip.map_treebank(_adapter(["i", "in", "the", "bank", "."]), tmp_path, "upos")
    torch.manual_seed(0)
    tpru = _TinyModel("tpru[roles=6,layers=2]", 7)
    dev, test = (ip.read_split(tpru, 2, tokens.ids[s]) for s in ip.SPLITS)
    r = ip.evaluate("tpru", dev, test, tokens, None)
    assert 0 <= r.nmi <= 1 and 0 < r.purity <= 1 and r.roles_used <= 6
    assert len(r.roles) == int(tokens.known["dev"].sum() + tokens.known["test"].sum())
    gru = _TinyModel("gru", 7)
    g = ip.evaluate("gru", *(ip.read_split(gru, 1, tokens.ids[s]) for s in ip.SPLITS), tokens, r.roles_used)
    assert g.clusters == f"k-means, k = {r.roles_used}"
    assert "| role |" in ip.role_table_md(r, tokens)


@pytest.mark.realdata
def test_ud_ewt_reads_as_provenance_says():
    root = os.environ.get("TPRBENCH_DATA")
    if not root or not (Path(root) / "ud_english_ewt").is_dir():
        pytest.skip("TPRBENCH_DATA/ud_english_ewt not present")
    dev = read_conllu(Path(root) / "ud_english_ewt" / "en_ewt-ud-dev.conllu")
    assert (len(dev.sentences), dev.tokens, dev.skipped_empty) == (2002, 25148, 2)
