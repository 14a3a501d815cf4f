"""`tprbench units`: every registered unit with its options and parameter counts."""

from __future__ import annotations

import argparse

from harness.commands.support import bounds

HELP = "list registered units with their options and parameter counts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dim", type=bounds.DIM, default=64, help="hidden size d for the counts (default 64)")
    p.add_argument("--input-dim", type=bounds.DIM, default=None, help="input size d' (default: same as --dim)")
    p.add_argument(
        "--hrr-fillers",
        type=bounds.DIM,
        default=None,
        metavar="D'",
        help="also count Luo et al.'s HRR word embedding with d' basis fillers per role (width --input-dim)",
    )
    p.add_argument("--hrr-roles", type=bounds.integer(1, 1024), default=2, metavar="N", help="HRR roles (default 2)")
    p.add_argument("--hrr-basis", choices=("fixed", "isometric"), default="fixed", help="HRR bases (default fixed)")
    p.add_argument("--vocab", type=bounds.integer(1, 10**8), default=10_000, help="vocabulary size for the embedding counts (default 10,000: PTB)")
    p.add_argument("specs", nargs="*", help="unit specs to count instead of every registered name, e.g. 'tpru[roles=32]'")


def run(args: argparse.Namespace) -> int:
    import inspect

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    d, din = args.dim, args.input_dim or args.dim
    # A first line before torch loads and every unit is built (seconds).
    Console(width=160).print(
        f"counting parameters at d={d}, d'={din}: " + (f"{len(args.specs)} unit spec(s)" if args.specs else "every registered unit"),
        markup=False,
        highlight=False,
    )
    import units

    table = Table(title=f"tprbench units (d={d}, d'={din})")
    for col in ("unit", "options (default)", "formula params", "total params", "about"):
        table.add_column(col, justify="right" if "params" in col else "left")
    for spec in args.specs or units.available():
        try:
            resolved, hidden = _resolve_listed(spec, d, given=bool(args.specs))
        except units.UnitSpecError as exc:
            if args.specs:
                raise
            table.add_row(escape(spec), "", "", "", f"[red]cannot load:[/] {escape(str(exc))}")
            continue
        opts = units.unit_options(resolved.cls)
        opt_text = ", ".join(f"{k}={v.default}" for k, v in opts.items() if v.default is not inspect.Parameter.empty)
        counts = units.param_counts(resolved, din, hidden)
        doc = (inspect.getdoc(resolved.cls) or "").splitlines()[0]
        if hidden != d:
            doc = f"(hidden {hidden}) {doc}"
        formula = f"{counts.formula:,}" if counts.formula is not None else "n/a"
        table.add_row(
            escape(str(resolved.spec)), opt_text + ("; " if opt_text else "") + "layers=1, bidirectional=false", formula, f"{counts.total:,}", doc
        )
    embedding = None
    if getattr(args, "hrr_fillers", None) is not None:  # checked before anything is printed (callers may build args without it)
        embedding = _embedding_table(args.vocab, din, args.hrr_fillers, args.hrr_roles, args.hrr_basis)
    from tasks.arch_options import ENCODER_LAYERS

    # Which architecture the counts are of: one layer; a study table counts the task's encoder.
    table.caption = (
        f"params of one layer of each unit (layers=1). A task's encoder stacks its `layers` option "
        f"(logic, nli, transfer: {ENCODER_LAYERS} by default), so a study table's # params is "
        f"{ENCODER_LAYERS}× these there; `tprbench tasks` lists each task's options"
    )
    Console(width=160).print(table)
    if embedding is not None:
        Console(width=160).print(embedding)
    return 0


def _embedding_table(vocab: int, dim: int, fillers: int, roles: int, basis: str) -> object:
    """The HRR embedding's parameter counts beside the plain embedding it replaces."""
    from rich.table import Table

    from tasks.errors import TaskError
    from tasks.lm.hrr import HRRWordEmbedding

    try:
        counts = HRRWordEmbedding(vocab, dim, fillers, roles=roles, basis=basis, anneal_steps=0).param_counts()
    except ValueError as exc:
        raise TaskError(f"--hrr-fillers {fillers}: {exc}") from None
    table = Table(title=f"word embedding (V={vocab:,}, d={dim})")
    for col in ("embedding", "params", "formula"):
        table.add_column(col, justify="right" if col == "params" else "left")
    trained = " + N·d'·d + N·d (trained bases)" if basis == "isometric" else " (fixed bases are not trained)"
    table.add_row("plain", f"{counts.plain:,}", "V·d")
    table.add_row(f"hrr (N={roles}, d'={fillers}, {basis})", f"{counts.formula:,}", "V·N·d'" + trained)
    return table


def _resolve_listed(spec: str, d: int, given: bool):
    """A unit resolved at hidden size d, and that size. A registered unit listed by name whose
    defaults cannot be built at d (TPRN: role_dim=10 must divide d; TPR-RNN: d = E·R·E) is sized
    as `tprbench bench units` sizes it against GRU (its metadata's `size_against_gru`, units/meta.py),
    so every unit's counts show; a spec the user names is counted as written."""
    import units

    try:
        return units.resolve(spec, d), d
    except units.UnitSpecError:
        from ..bench.units import size_rule, sized_spec

        if given or size_rule(units.resolve(spec)) is None:
            raise
        sized, hidden = sized_spec(spec, d)
        return units.resolve(sized, hidden), hidden
