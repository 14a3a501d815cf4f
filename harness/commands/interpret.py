"""`tprbench interpret RUN_ID [--control RUN_ID ...]`: roles vs POS on UD English EWT (ICLR-2020
TPRU §6; TPRN: Palangi et al. §7; TPGN: Huang et al. 2018 §5.3), with the untrained model,
equal-width LSTM/GRU runs and the embeddings as controls; a polysemy listing (`--word bank`); for
an LM run with the HRR embedding, its filler sets vs syntax and semantics (Luo et al. Table 4).

Which interface each unit has (tasks/analysis/readout.py): TPRU fillers, TPRN role attention,
TPGN unbinding vectors; a unit without one (LSTM, GRU, TPR-RNN's tpr3, ...) gets one line saying
so, and its states are clustered as the controls' are. Runs: NLI (word vocabulary) and LM (words
or BPE pieces, harness/analysis/words.py); logic and bAbI read no words."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "per-token roles of a trained encoder vs gold POS on UD English EWT (NMI, purity, probe, PMI table, controls)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_id", metavar="RUN_ID", help="MLflow run id of a finished trial/seed run, or a `tprbench train` run directory (nli, or lm: words or BPE)"
    )
    p.add_argument(
        "--control",
        action="append",
        metavar="RUN_ID",
        help="a run (id or train run directory) of a unit without roles (LSTM/GRU of equal width): k-means of its states (repeatable)",
    )
    p.add_argument("--treebank", default=None, help="folder with en_ewt-ud-{dev,test}.conllu (default $TPRBENCH_DATA/ud_english_ewt)")
    p.add_argument("--tag", choices=("upos", "xpos"), default="upos", help="gold tag column (default UPOS, 17 tags)")
    p.add_argument("--layer", type=bounds.LAYER, default=1, help="encoder layer read (default 1: the one reading the embeddings)")
    p.add_argument(
        "--clusters",
        type=bounds.integer(2, 100_000),
        default=None,
        help="k for k-means of units without roles (default: the roles the run's unit uses on these tokens)",
    )
    p.add_argument("--word", action="append", metavar="WORD", help="polysemy listing: occurrences of WORD and their roles")
    p.add_argument(
        "--word-split",
        default="mnli:dev_matched",
        help="NLI split (source:split) the words are looked up in "
        "(default mnli:dev_matched, read whole from the run's data root); for an LM run one of its "
        "splits (default there: valid)",
    )
    p.add_argument("--no-untrained", action="store_true", help="skip the untrained-model control")
    p.add_argument("--root", default="runs", help="run directory (default ./runs)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--out", default=None, help="folder for interpret.md/.json, roles.md, polysemy.md (default runs/interpret/<run>)")


def run(args: argparse.Namespace) -> int:
    import os
    import shlex
    import sys
    from pathlib import Path

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from rich.console import Console
    from rich.markup import escape

    from harness.analysis import interpret as ip
    from harness.analysis.sources import load_source, tracking
    from harness.commands.support.output_path import check_output_path
    from harness.record.compressed import reading_root
    from harness.record.layout import RunRoot
    from harness.record.store_check import check_stores

    out = Path(args.out) if args.out else Path("runs") / "interpret" / Path(args.run_id).name[:8]
    check_output_path(out, "--out")  # before any model is loaded
    console = Console()
    root = reading_root(Path(args.root).expanduser().resolve())  # a committed mlflow.db.gz: its decompressed copy
    cache = RunRoot(root).cache
    uri = tracking(root, args.tracking_uri)
    check_stores(args.tracking_uri, reading=True)
    treebank = Path(args.treebank) if args.treebank else Path(os.environ.get("TPRBENCH_DATA", "../shared/data")) / "ud_english_ewt"
    adapters: dict = {}
    main = load_source(args.run_id, uri, cache, trained=True, adapters=adapters)
    tokens = ip.map_treebank(main.adapter, treebank, args.tag)
    console.print(
        f"UD EWT: {sum(len(v) for v in tokens.tags.values())} tokens, OOV {tokens.oov_rate():.1%} "
        f"(types {tokens.oov_type_rate():.1%}); {escape(tokens.mapping)}"
    )
    untrained = None if args.no_untrained else load_source(args.run_id, uri, cache, trained=False, adapters=adapters)
    controls = [load_source(c, uri, cache, trained=True, adapters=adapters) for c in args.control or []]
    results, attention = _roles(args, console, tokens, main, untrained, controls)
    majority = ip.majority_baseline(tokens)
    command = shlex.join(["tprbench", *sys.argv[1:]]) if sys.argv[1:2] == ["interpret"] else "tprbench interpret ..."
    header = ["tprbench interpret", f"Regenerate with: {command}"]
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "interpret.md", out / "interpret.json", out / "roles.md"]
    files[0].write_text(
        ip.summary_md(results, tokens, majority, args.tag, header) + (ip.thresholds_md(attention) if attention else ""), encoding="utf-8"
    )
    files[1].write_text(ip.to_json(results, tokens, majority) + "\n", encoding="utf-8")
    files[2].write_text(ip.role_table_md(results[0], tokens), encoding="utf-8")
    if ip.has_filler_sets(main.model):
        files += _filler_sets(console, tokens, main, untrained, controls, out, header)
    if args.word:
        files.append(_polysemy(args, console, main, cache, out))
    console.print(f"wrote {', '.join(escape(str(f)) for f in files)}")
    return 0


def _roles(args, console, tokens, main, untrained, controls) -> tuple[list, dict]:
    """Roles (or clusters) vs tags for the run, its untrained model, each control and the embeddings;
    for TPRN (role attention) also the paper's thresholded measure, per system."""
    from rich.markup import escape

    from harness.analysis import interpret as ip
    from harness.analysis.sources import AnalysisError
    from harness.analysis.words import word_map

    def readings(source):
        with console.status(f"reading {escape(source.label)}"):
            return tuple(ip.read_split(source.model, args.layer, tokens.ids[s], tokens.positions[s]) for s in ip.SPLITS)

    for c in controls:
        if word_map(c.adapter).key != word_map(main.adapter).key:
            raise AnalysisError(
                f"control {c.run_id}: {c.label} reads another vocabulary than {main.label}; a control "
                "must read the same tokens (a run of the same task and data)"
            )
    dev, test = readings(main)
    k = args.clusters
    if dev.interface == "states":
        console.print(
            f"note: {escape(main.label)} has no interpretation interface (fillers: TPRU; role attention: "
            f"TPRN; unbinding vectors: TPGN); its states are clustered (k-means, k = {k or 64}) as a "
            f"control's are"
        )
    results = [ip.evaluate(main.label, dev, test, tokens, None if dev.roles is not None else (k or 64))]
    k = k or (results[0].roles_used if dev.roles is not None else 64)
    attention = {}
    if dev.interface == "attention":
        attention[main.label] = ip.attention_thresholds(dev, test, tokens)
    if untrained is not None:
        u_dev, u_test = readings(untrained)
        results.append(ip.evaluate(untrained.label, u_dev, u_test, tokens, k))
        if u_dev.interface == "attention":
            attention[untrained.label] = ip.attention_thresholds(u_dev, u_test, tokens)
    for c in controls:
        results.append(ip.evaluate(f"{c.label} (control)", *readings(c), tokens, k))
    results.append(ip.evaluate("embeddings (layer input)", dev, test, tokens, k, what="inputs"))
    for r in results:
        console.print(
            f"{escape(r.name)}: NMI {r.nmi:.3f}, purity {r.purity:.3f}, probe {r.probe_features:.3f} "
            f"(states {r.probe_states:.3f}) {escape('[' + r.clusters + ']')}"
        )
    for name, rows in attention.items():
        r = next(x for x in rows if x["theta"] == 0.65)
        console.print(f"{escape(name)}: θ = 0.65, max p(DET | role) {r['max_p_det']:.3f}, max p(VERB ∪ ADJ | role) {r['max_p_verb_adj']:.3f}")
    return results, attention


def _filler_sets(console, tokens, main, untrained, controls, out, header) -> list:
    """HRR runs: filler sets vs syntax/semantics for the run, its untrained model and the controls."""
    import json

    from rich.markup import escape

    from harness.analysis import interpret as ip

    sets, counts = ip.filler_set_results(main.label, main.model, tokens)
    for other in ([untrained] if untrained is not None else []) + controls:
        name = other.label if other is untrained else f"{other.label} (control)"
        sets += ip.filler_set_results(name, other.model, tokens)[0]
    for r in sets:
        console.print(
            f"filler sets: {escape(r.name)} {escape(r.vectors)}: AUC syntactic {r.syntactic:.3f}, semantic {r.semantic:.3f} ({r.types} verb types)"
        )
    md, js = out / "filler_sets.md", out / "filler_sets.json"
    md.write_text(ip.filler_sets_md(sets, counts, header), encoding="utf-8")
    js.write_text(json.dumps({"pairs": counts, "rows": [r.__dict__ for r in sets]}, indent=1) + "\n", encoding="utf-8")
    return [md, js]


def _polysemy(args, console, main, cache, out):
    from rich.markup import escape

    from harness.analysis import interpret as ip

    split = args.word_split
    if hasattr(main.adapter, "streams") and ":" in split:
        split = "valid"  # an LM run: its own validation sentences
    sentences = ip.corpus_sentences(main, split, cache)
    parts = []
    for word in args.word:
        rows, note = ip.polysemy(main, args.layer, word if hasattr(main.adapter, "streams") else word.lower(), sentences)
        parts.append(ip.polysemy_md(word, split, rows, note))
        console.print(
            f"polysemy {escape(word)}: {len(rows)} occurrences, {len({r['role'] for r in rows})} distinct roles"
            if rows
            else f"polysemy {escape(word)}: {escape(note)}"
        )
    path = out / "polysemy.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
