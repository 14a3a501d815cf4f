"""The papers' claims against the record: one table of every seed paper's claims (`tprbench papers`).

A claims file (studies/papers.toml) lists each claim once: the paper's number, the study and the
record that measure it, what to read from that record (a *measure*), the budget as a fraction of
the paper's, and the rule that turns the two numbers into a verdict. This module reads the
committed records (nothing is trained), computes every measure, and writes reports/papers/
deterministically — the same records give the same bytes, so the report is regenerated, never
edited by hand.

Verdicts, in the order a claim moves through them:
  not yet run      the study runs here but its record has none of the claim's runs yet, or the claim
                   names a `plan` (a study file this machine can run, its measured cost) and no record
  in progress      some of the runs the measure needs are recorded, not all (counts shown)
  held             every run is recorded; the rule decides it holds
  did not hold     every run is recorded, the rule decides it fails, AND the authors' own code, run at
                   the same budget (`authors_code`), fails it too: a finding about the claim at this
                   budget, not about the reproduction
  short of the authors' code   ours fails but the authors' own code at the same budget meets the
                   claim: a fault of the reproduction until shown otherwise, never a finding
  did not hold here, unchecked   ours fails and the authors' code was not run at this budget (or ran
                   on too few of the claim's cells to tell): not yet quotable as "did not hold"
  not reachable on this machine   the claim names a `cluster` plan (a study file and its cost)
                   and no record here measures it
  paper table not read here   the claim lists a table whose text could not be read here (`unread`:
                   why); nothing is quoted or measured for it

Why a measure is a small closed vocabulary (one cell over its seeds, a mean over cells, a count
of cells over a threshold) and not free code: the claims file is data a researcher edits, and
every verdict must be reproducible from the file and the record alone.
"""

from __future__ import annotations

import csv
import io
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic

from tasks.result import RunStatus, paused_epoch
from units.spec import glob_regex, spec_pattern

from ..record.compressed import DB, reading_root, stored_record
from ..record.contract import Col, metric_col, metric_of
from ..record.layout import sqlite_uri
from ..record.reader import ReportError


class PapersError(ReportError):
    """A claims file that does not validate (one line: the file, the claim, the field)."""


#: The largest magnitude of a claim's number (a paper's value, a tolerance, a threshold): finite and
#: far above any score, error or count a paper reports, so 1e309 (inf in TOML) or a typo is refused.
NUMBER_MAX = 1e12
FACTOR_MAX = 1e6  # a measure's scale, a budget's fraction: 1e6 times the paper's is no budget
Number = Annotated[float, pydantic.Field(ge=-NUMBER_MAX, le=NUMBER_MAX)]
#: Characters a claims file's text may not hold: control characters (NUL, escape, carriage return...;
#: a tab and a newline are text) and Unicode's line and paragraph separators, which break a table row.
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _printable(value: Any) -> Any:
    """Text (also inside a table, as `measure.select`) without control characters: they went into
    README.md and claims.csv as they were (a NUL among them)."""
    texts = value.values() if isinstance(value, dict) else [value]
    for text in texts:
        bad = _UNPRINTABLE.search(text) if isinstance(text, str) else None
        if bad:
            raise ValueError(f"contains the control character U+{ord(bad.group()):04X} (character {bad.start() + 1}); write it as text")
    return value


class _Strict(pydantic.BaseModel):
    """Every model of a claims file: unknown keys refused, every number finite (NaN and ±inf, also
    1e309, which TOML reads as inf, made verdicts and "nan (2 seeds)"), every text printable."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @pydantic.field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        return _printable(value)


class Budget(_Strict):
    """Our budget as fractions of the paper's: training data, epochs (or updates), model size."""

    data: float = pydantic.Field(gt=0, le=FACTOR_MAX)
    epochs: float = pydantic.Field(gt=0, le=FACTOR_MAX)
    size: float = pydantic.Field(gt=0, le=FACTOR_MAX)
    note: str = ""

    @property
    def fraction(self) -> float:
        return self.data * self.epochs * self.size


class Measure(_Strict):
    """What to read from the record: a run metric of the finished final-phase seed runs of the
    cells `select` matches (task_label, arch, unit, dim: equal, or a `*`/`?` glob), times `scale`.

    over = "seeds":  exactly one cell; its mean ± std over seeds.
    over = "cells":  the mean over cells of each cell's seed mean; ± the std over cells.
    over = "count_above": how many cells have a seed mean above `above` (bAbI's failed tasks).

    A diverged seed (NaN/inf loss) has no test value. By default (`diverged = "left out"`) it is
    left out of its cell's mean and named in the text. `diverged = "failed"` (count_above only)
    counts a cell with a diverged seed as above `above`: the reading of a training loop that, like
    ischlag/TPR-RNN's `train()`, reports a seed at its best validation before the NaN — for seeds
    that diverge before they learn the task (TPR-RNN's ablations on qa6, within 400 updates), a
    failed seed. The claim's note should say why that reading fits its runs.
    """

    select: dict[Literal["task_label", "arch", "unit", "dim"], str]
    metric: str
    scale: float = pydantic.Field(1.0, gt=0, le=FACTOR_MAX)
    over: Literal["seeds", "cells", "count_above"] = "seeds"
    above: Number | None = None
    cells: int | None = pydantic.Field(None, ge=1, le=1_000_000, description="cells the measure needs (default: what the study file has)")
    digits: int = pydantic.Field(2, ge=0, le=6)
    diverged: Literal["left out", "failed"] = "left out"

    @pydantic.model_validator(mode="after")
    def _threshold(self) -> Measure:
        if (self.over == "count_above") != (self.above is not None):
            raise ValueError('`above` is required with over = "count_above" and only there')
        if self.diverged == "failed" and self.over != "count_above":
            raise ValueError('diverged = "failed" counts cells as failed: it needs over = "count_above"')
        return self


class Verdict(_Strict):
    """How ours and the paper's numbers decide the claim.

    within:  |ours − paper_number| ≤ tolerance;  at_most / at_least: ours ≤ / ≥ value;
    below_claim / above_claim: ours < / > the value of another claim (by id), e.g. TPR-RNN's
    error below the LSTM baseline's; within_claim: |ours − that value| ≤ tolerance (two-sided: "the
    same as"); at_most_claim: ours ≤ that value + tolerance (one-sided, "costs nothing" for an error or
    a perplexity: being far better than the other claim does not fail it).
    """

    rule: Literal["within", "at_most", "at_least", "below_claim", "above_claim", "within_claim", "at_most_claim"]
    tolerance: float | None = pydantic.Field(None, ge=0, le=NUMBER_MAX)
    value: Number | None = None
    claim: str | None = None

    @pydantic.model_validator(mode="after")
    def _needs(self) -> Verdict:
        fields = {
            "within": ("tolerance",),
            "at_most": ("value",),
            "at_least": ("value",),
            "below_claim": ("claim",),
            "above_claim": ("claim",),
            "within_claim": ("claim", "tolerance"),
            "at_most_claim": ("claim", "tolerance"),
        }[self.rule]
        if any(getattr(self, f) is None for f in fields):
            raise ValueError(f"rule {self.rule!r} needs " + " and ".join(f"`{f}`" for f in fields))
        return self


class AuthorsCode(_Strict):
    """The claim's measure on the authors' own code, run outside tprbench at the same budget (same
    data, same number of updates, their training loop), and where the runs are written down.

    Why typed in and not read: their code writes its own logs, not an MLflow record; `source` is the
    committed file (relative to the claims file's base) that lists every run and the script that
    computed `value` from them, so the number is as checkable as the record's.
    `covers = "some"`: their code ran on some of the measure's cells only, and `value` is a LOWER
    BOUND of their measure over all the cells: a count of the failed cells among those run, or a
    mean of non-negative errors whose cells not run count as 0 (the sum over those run divided by
    all cells). A lower bound decides only a failure: above what the rule allows (at_most: above its
    value; within: above paper + tolerance); otherwise the verdict stays unchecked."""

    value: Number
    text: str = pydantic.Field(min_length=1)
    source: str = pydantic.Field(min_length=1)
    covers: Literal["all", "some"] = "all"


class Cluster(_Strict):
    """Where a claim's budget does not fit this machine: the study file that runs it on a cluster
    and its estimated cost, with the measurement the estimate comes from."""

    study: str | None = None
    estimate: str


class Plan(_Strict):
    """A claim this machine can run but no committed record measures yet (verdict "not yet run"):
    the study file that runs it, its cost (from a measurement, and how it was scaled), and the budget
    it would run at, as a fraction of the authors' own code's."""

    study: str
    cost: str
    budget: Budget | None = None


class Claim(_Strict):
    id: str = pydantic.Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    seed: str = pydantic.Field(pattern=r"^\d{3}$")
    paper: str
    where: str
    claim: str
    paper_value: str
    paper_number: Number | None = None
    study: str | None = None
    record: str | None = None
    report: str | None = None
    measure: Measure | None = None
    verdict: Verdict | None = None
    budget: Budget | None = None
    authors_code: AuthorsCode | None = None
    cluster: Cluster | None = None
    plan: Plan | None = None
    unread: str = ""
    note: str = ""

    @pydantic.model_validator(mode="after")
    def _complete(self) -> Claim:
        measured = [self.study, self.record, self.measure, self.verdict, self.budget]
        if any(v is not None for v in measured) and not all(v is not None for v in measured):
            raise ValueError("a measured claim needs all of study, record, measure, verdict and budget")
        if self.measure is None and self.cluster is None and self.plan is None and not self.unread:
            raise ValueError("a claim needs a measure (study, record, measure, verdict, budget), a plan, a cluster plan or `unread`")
        if self.plan is not None and (self.measure is not None or self.cluster is not None):
            raise ValueError("a plan (not yet run here) excludes a measure and a cluster plan")
        if self.verdict is not None and self.verdict.rule == "within" and self.paper_number is None:
            raise ValueError("rule 'within' compares with paper_number: give it")
        if self.authors_code is not None and (self.verdict is None or self.verdict.rule not in ("within", "at_most", "at_least")):
            raise ValueError("authors_code needs a measured claim whose rule is within, at_most or at_least (the rule decides their number too)")
        return self


class ClaimsFile(_Strict):
    title: str
    claims: list[Claim]

    @pydantic.model_validator(mode="after")
    def _ids(self) -> ClaimsFile:
        ids = [c.id for c in self.claims]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"claim ids must be unique: {', '.join(dup)}")
        for c in self.claims:
            ref = c.verdict.claim if c.verdict is not None else None
            if ref is not None and ref not in ids:
                raise ValueError(f"claim {c.id!r}: verdict.claim {ref!r} is not a claim id")
        return self


def load_claims(path: str | Path) -> ClaimsFile:
    """The claims file, validated; errors name the file, the claim and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PapersError(f"claims file {path} not found") from None
    except UnicodeDecodeError as exc:  # a binary file, or another encoding
        raise PapersError(
            f"claims file {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); give the TOML claims file"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PapersError(f"claims file {path}: cannot read it ({exc})") from None
    try:
        return ClaimsFile.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = list(err["loc"])
            where = ""
            if len(loc) >= 2 and loc[0] == "claims" and isinstance(loc[1], int):
                claims = data.get("claims") if isinstance(data.get("claims"), list) else []
                cid = claims[loc[1]].get("id") if loc[1] < len(claims) and isinstance(claims[loc[1]], dict) else None
                where = f"claim {cid or '#' + str(loc[1] + 1)!s}"
                loc = loc[2:]
            field_ = ".".join(str(p) for p in loc)
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{where}{': ' if where and field_ else ''}{field_}: {msg}" if (where or field_) else msg)
        raise PapersError(f"claims file {path}: " + "; ".join(problems)) from None


# -- reading the record ---------------------------------------------------------------------------


@dataclass
class StudyRuns:
    """The finished final-phase seed runs of one study's record, as plain dicts, with the cells."""

    name: str
    seeds: int
    cells: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    recorded: bool


def read_study(study_file: Path, record: Path) -> StudyRuns:
    """One study's counted runs (harness.report.aggregate.counted_runs: the current parameters,
    seeds below the study's count) from the record under `record` (its mlflow.db, or a committed
    mlflow.db.gz read through its decompressed copy: harness.record.compressed)."""
    from .aggregate import counted_runs, records
    from .load import load_record, resolve_study

    name, seeds, cell_ids, note = resolve_study(str(study_file))
    if cell_ids is None:  # the cells of the study file pick the runs: without them old cells would count
        why = (note or "it did not validate").split("; reporting every cell")[0]
        raise PapersError(f"{study_file}: its cells are needed to pick the record's runs, but {why}")
    seeds = seeds or 1
    read = reading_root(record)
    db = read / DB
    if not db.is_file():
        return StudyRuns(name, seeds, [], [], recorded=False)
    try:
        runs, cells = load_record(sqlite_uri(db.resolve()), name, cell_ids, root=read)
    except ReportError:
        return StudyRuns(name, seeds, [], [], recorded=False)
    counted = counted_runs(runs, cells, seeds)
    cell_rows = records(cells)
    for c in cell_rows:
        label = c.get(Col.LABEL) or ""
        c["task_label"] = label.split("/", 1)[0] if "/" in label else c.get(Col.TASK)
    # Finished runs give values; diverged ones (a NaN loss) are results too — the seed ran to its
    # end — so they count as done and are reported, never averaged. Errored runs (the machine's
    # fault, not the model's) are neither: they will be rerun. Paused runs (`run --until-epoch`)
    # give their best-so-far values but have not ended: a measure over them is in progress.
    done = [r for r in records(counted) if r.get(Col.STATUS) in (RunStatus.FINISHED, RunStatus.DIVERGED, RunStatus.PAUSED)]
    return StudyRuns(name, seeds, cell_rows, done, recorded=True)


def record_problem(record: Path) -> str | None:
    """Why `record` is not a study's record folder (one holding its `mlflow.db` or `mlflow.db.gz`), or None. A claim
    whose record has none of its runs yet is "not yet run"; a record path that is not a record is
    an error, never that verdict."""
    if not record.exists():
        return "no such folder"
    if not record.is_dir():
        return "is a file, not a record folder"
    if stored_record(record) is None:
        return "holds no record (no mlflow.db file; `tprbench record save` writes one)"
    return None


# -- measures -------------------------------------------------------------------------------------


@dataclass
class Measured:
    value: float | None  # None: nothing recorded yet
    text: str
    complete: bool
    progress: str = ""
    commits: list[str] = field(default_factory=list)
    runs: int = 0  # seed runs that ended (finished or diverged); paused ones are not counted


def _matches(cell: dict[str, Any], select: dict[str, str]) -> bool:
    """Each selected field matches its pattern: `*` and `?` are wildcards, brackets are literal
    (`units.spec.glob_regex`), and a unit is selected by `units.spec.spec_pattern`, as written or in
    canonical form, its options in any order (as the study file writes it, or as the record does)."""
    for key, pattern in select.items():
        names = ("unit", "unit_canonical") if key == "unit" else (key,)
        values = {"" if cell.get(n) is None else str(cell.get(n)) for n in names}
        rx = spec_pattern(pattern) if key == "unit" else glob_regex(pattern)
        if not any(rx.match(v) for v in values):
            return False
    return True


def _mean_std(values: list[float]) -> tuple[float, float]:
    from .aggregate import mean_std

    return mean_std(values)


def _fmt(mean: float, std: float, digits: int) -> str:
    text = f"{mean:.{digits}f}"
    return text if math.isnan(std) else f"{text} ± {std:.{digits}f}"


def _n(count: int, noun: str) -> str:
    """`1 seed`, `3 seeds`: the table is quoted, and "1 seeds" reads as a typo."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _at_epochs(epochs: list[int | None]) -> str:
    """` at epoch 30` / ` at epochs 22-30` for paused seeds (empty where a reason does not say): a
    best-so-far value reads differently after 5 epochs of 90 than after 60."""
    known = sorted({e for e in epochs if e is not None})
    if not known:
        return ""
    return f" at epoch {known[0]}" if len(known) == 1 else f" at epochs {known[0]}-{known[-1]}"


def measure(m: Measure, data: StudyRuns) -> Measured:
    """Compute one measure from a study's counted runs (see `Measure`)."""
    cells = [c for c in data.cells if _matches(c, m.select)]
    col = metric_col(m.metric)
    by_cell: dict[str, list[float]] = {}
    ended: dict[str, int] = {}  # finished or diverged seeds per cell
    diverged = 0
    diverged_cells: set[str] = set()
    paused: list[int | None] = []  # the epoch each paused seed's best-so-far value is from
    commits: set[str] = set()
    wanted = {c[Col.CELL] for c in cells}
    for r in data.runs:
        if r[Col.CELL] not in wanted:
            continue
        if r.get(Col.STATUS) == RunStatus.PAUSED:  # its best so far: a value, not an ended seed
            paused.append(paused_epoch(r.get(Col.REASON)))
        else:
            ended[r[Col.CELL]] = ended.get(r[Col.CELL], 0) + 1
        if r.get(Col.GIT_COMMIT):
            commits.add(str(r[Col.GIT_COMMIT]))
        v = r.get(col)
        if r.get(Col.STATUS) not in (RunStatus.FINISHED, RunStatus.PAUSED):
            diverged += 1
            diverged_cells.add(r[Col.CELL])
        elif v is not None and not (isinstance(v, float) and math.isnan(v)):
            by_cell.setdefault(r[Col.CELL], []).append(float(v) * m.scale)
        else:
            logged = sorted(
                metric_of(k) for k, x in r.items() if metric_of(k) is not None and x is not None and not (isinstance(x, float) and math.isnan(x))
            )
            raise PapersError(
                f"metric {m.metric!r} is not in the record's finished run {r.get(Col.RUN_KEY) or r.get(Col.RUN_ID)} (it logs: {', '.join(logged)})"
            )
    need_cells = m.cells or len(cells) or 1
    if m.over == "seeds" and len(cells) > 1:
        raise PapersError(f'measure {m.select} selects {len(cells)} cells; over = "seeds" needs exactly one')
    full = [cid for cid, n in ended.items() if n >= data.seeds]
    complete = len(full) >= need_cells
    progress = f"ended: {len(full)} of {_n(need_cells, 'cell')} × {_n(data.seeds, 'seed')} ({_n(sum(ended.values()), 'run')})"
    note = (f"; {diverged} diverged" if diverged else "") + (f"; {len(paused)} paused{_at_epochs(paused)}, best so far" if paused else "")
    runs = sum(ended.values())
    failing = diverged_cells if m.diverged == "failed" else set()
    if not by_cell and not failing:
        return Measured(None, "–" + (f" ({diverged} diverged)" if diverged else ""), complete, progress, sorted(commits), runs)
    means = {cid: _mean_std(v)[0] for cid, v in by_cell.items()}
    if m.over == "seeds":
        (vals,) = by_cell.values()
        mean, std = _mean_std(vals)
        text = _fmt(mean, std, m.digits) + f" ({_n(len(vals), 'seed')}{note})"
        return Measured(mean, text, complete, progress, sorted(commits), runs)
    if m.over == "cells":
        mean, std = _mean_std([means[c] for c in sorted(means)])
        text = _fmt(mean, std, m.digits) + f" over {_n(len(means), 'task')} ({_n(sum(map(len, by_cell.values())), 'seed')}{note})"
        return Measured(mean, text, complete, progress, sorted(commits), runs)
    counted = set(means) | failing
    count = sum(cid in failing or means[cid] > float(m.above) for cid in counted)
    why = ", counted as failed" if failing else ""
    return Measured(
        float(count),
        f"{count} of {len(counted)}" + (f" ({_n(diverged, 'seed')} diverged{why})" if diverged else ""),
        complete,
        progress,
        sorted(commits),
        runs,
    )


# -- verdicts -------------------------------------------------------------------------------------

HELD, NOT_HELD, NOT_REACHABLE, NOT_RUN, IN_PROGRESS = ("held", "did not hold", "not reachable on this machine", "not yet run", "in progress")
NOT_READ = "paper table not read here"
SHORT = "short of the authors' code"
UNCHECKED = "did not hold here, unchecked"


def _rule_holds(claim: Claim, value: float) -> bool:
    """Rules within / at_most / at_least applied to one number (ours, or the authors' code's)."""
    v = claim.verdict
    assert v is not None
    if v.rule == "within":
        return abs(value - float(claim.paper_number)) <= float(v.tolerance)  # type: ignore[arg-type]
    if v.rule == "at_most":
        return value <= float(v.value)  # type: ignore[arg-type]
    return value >= float(v.value)  # type: ignore[arg-type]


def _not_held(claim: Claim) -> str:
    """Ours fails the claim: a finding only if the authors' own code at the same budget fails it too."""
    a = claim.authors_code
    if a is None:
        return UNCHECKED
    if a.covers == "some":  # a lower bound: it decides only a failure from above
        v = claim.verdict
        assert v is not None
        ceiling = float(v.value) if v.rule == "at_most" else float(claim.paper_number) + float(v.tolerance) if v.rule == "within" else None  # type: ignore[arg-type]
        return NOT_HELD if ceiling is not None and a.value > ceiling else UNCHECKED
    return SHORT if _rule_holds(claim, a.value) else NOT_HELD


def decide(claim: Claim, ours: Measured | None, others: dict[str, Measured]) -> str:
    """The verdict of one claim (module docstring), from its measure and, for a comparison, the
    other claim's measure (which must be complete too)."""
    if ours is None:
        return NOT_RUN if claim.plan is not None else NOT_REACHABLE if claim.cluster is not None else NOT_READ
    if ours.value is None:  # nothing finished: not run yet, or every seed diverged
        return _not_held(claim) if ours.complete else (IN_PROGRESS if ours.runs else NOT_RUN)
    v = claim.verdict
    assert v is not None
    other = others.get(v.claim) if v.claim else None
    if not ours.complete or (other is not None and not other.complete):
        return IN_PROGRESS
    if v.rule in ("within", "at_most", "at_least"):
        ok = _rule_holds(claim, ours.value)
    else:
        if other is None or other.value is None:
            return IN_PROGRESS
        if v.rule == "within_claim":
            ok = abs(ours.value - other.value) <= float(v.tolerance)  # type: ignore[arg-type]
        elif v.rule == "at_most_claim":
            ok = ours.value <= other.value + float(v.tolerance)  # type: ignore[arg-type]
        else:
            ok = ours.value < other.value if v.rule == "below_claim" else ours.value > other.value
    return HELD if ok else _not_held(claim)


# -- the report -----------------------------------------------------------------------------------


@dataclass
class Row:
    claim: Claim
    ours: Measured | None
    verdict: str


def evaluate(claims: ClaimsFile, base: Path) -> list[Row]:
    """Every claim measured and decided; each (study, record) pair is read once."""
    studies: dict[tuple[str, str], StudyRuns] = {}
    measured: dict[str, Measured] = {}
    for c in claims.claims:
        if c.measure is None:
            continue
        key = (str(c.study), str(c.record))
        if c.authors_code is not None and not (base / c.authors_code.source).exists():
            raise PapersError(f"claim {c.id}: authors_code.source {c.authors_code.source} not found (relative to {base})")
        if key not in studies:
            study_file = base / str(c.study)
            if not study_file.is_file():
                raise PapersError(f"claim {c.id}: study file {c.study} not found (relative to {base})")
            record = base / str(c.record)
            problem = record_problem(record)
            if problem:  # a typo in a path read as "not yet run" and hid the claim
                raise PapersError(f"claim {c.id}: record {c.record}: {problem} (relative to {base})")
            studies[key] = read_study(study_file, record)
        try:
            measured[c.id] = measure(c.measure, studies[key])
        except PapersError as exc:
            raise PapersError(f"claim {c.id} ({c.record}): {exc}") from None
    return [Row(c, measured.get(c.id), decide(c, measured.get(c.id), measured)) for c in claims.claims]


def _claim_budget(c: Claim) -> Budget | None:
    """The claim's budget, or its plan's (the budget a not-yet-run claim would run at)."""
    return c.budget if c.budget is not None else c.plan.budget if c.plan is not None else None


def _budget(c: Claim) -> str:
    b = _claim_budget(c)
    if b is None:
        return "–"
    pct = 100 * b.fraction
    text = f"{pct:.0f}%" if pct >= 1 else f"{pct:.2g}%"
    return f"{text} (data {b.data:g} × epochs {b.epochs:g} × size {b.size:g})"


#: What Markdown would read as raw HTML or a character reference (CommonMark): `<` opening a tag,
#: comment or declaration, `&` starting an entity.
_RAW_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)")


def _html(text: str) -> str:
    """Text that Markdown shows as written: raw HTML in a claims file (`<script>`, `<img …>`) went
    into README.md as markup. Only what Markdown reads as markup is escaped: a `<` between numbers
    (`1.12 < 36.4`) is text there, and the committed report keeps its bytes."""
    return _RAW_HTML.sub(lambda m: "&lt;" if m.group() == "<" else "&amp;", text)


def _md(text: str) -> str:
    """A table cell: HTML escaped, pipes escaped, on one line."""
    return _html(text).replace("|", "\\|").replace("\n", " ")


COLUMNS = ["seed", "claim", "paper", "tprbench", "authors' code", "budget", "verdict", "commit", "record"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        c = r.claim
        ours = r.ours.text if r.ours is not None else "–"
        if r.ours is not None and r.verdict == IN_PROGRESS:
            ours += f" [{r.ours.progress}]"
        commits = ", ".join(x[:7] + ("-dirty" if x.endswith("-dirty") else "") for x in (r.ours.commits if r.ours else [])) or "–"
        if c.measure is not None:
            where = f"[{c.study}](../../{c.study})" + (f", report [{c.report}](../../{c.report})" if c.report else "")
        else:
            where = "–"
        verdict = r.verdict
        if c.cluster is not None and r.verdict in (NOT_REACHABLE, NOT_RUN):
            plan = f"[{c.cluster.study}](../../{c.cluster.study}), " if c.cluster.study else ""
            verdict += f": {plan}{c.cluster.estimate}"
        elif c.plan is not None and r.verdict == NOT_RUN:
            verdict += f": [{c.plan.study}](../../{c.plan.study}), {c.plan.cost}"
        elif r.verdict == NOT_READ:
            verdict += f": {c.unread}"
        authors = f"{c.authors_code.text} ([runs](../../{c.authors_code.source}))" if c.authors_code is not None else "–"
        out.append([c.seed, f"**{c.paper}**, {c.where}: {c.claim}", c.paper_value, ours, authors, _budget(c), verdict, commits, where])
    return out


def markdown(claims: ClaimsFile, rows: list[Row], command: str, source: str) -> str:
    """reports/papers/README.md: the table, then each claim's note. No timestamps: regenerating
    from the same records gives the same bytes."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    lines = [
        f"# {_html(claims.title)}",
        "",
        f"Generated from the committed records by `{command}` (claims: `{source}`); do not edit by hand.",
        "Each number under *tprbench* is read from the record of the study it links (mean ± std over seeds,",
        "or over tasks where it says so); the budget is ours as a fraction of what the authors' own code runs",
        "(data × epochs or updates × size; the notes cite the line of their training loop). *authors' code* is the",
        'same measure on the authors\' own code run at that budget outside tprbench: a claim "did not hold" only',
        'where their code fails it too; where ours fails and theirs was not run it is "did not hold here, unchecked".',
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(":---" for _ in COLUMNS) + "|",
    ]
    for row in table_rows(rows):
        lines.append("| " + " | ".join(_md(x) for x in row) + " |")
    notes = [(r.claim.id, r.claim.note, b.note if b else "") for r in rows for b in [_claim_budget(r.claim)] if r.claim.note or (b and b.note)]
    if notes:
        lines += ["", "## Notes", ""]
        for cid, note, bnote in notes:
            text = " ".join(t for t in (note, f"Budget: {bnote}" if bnote else "") if t)
            lines.append(f"- `{cid}`: {_html(text)}")
    return "\n".join(lines) + "\n"


def csv_text(rows: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "id",
            "seed",
            "paper",
            "where",
            "claim",
            "paper_value",
            "tprbench",
            "tprbench_value",
            "complete",
            "authors_code",
            "authors_code_value",
            "budget_fraction",
            "verdict",
            "commits",
            "study",
            "record",
        ]
    )
    for r in rows:
        c = r.claim
        value = "" if r.ours is None or r.ours.value is None else repr(r.ours.value)
        b = _claim_budget(c)
        w.writerow(
            [
                c.id,
                c.seed,
                c.paper,
                c.where,
                c.claim,
                c.paper_value,
                r.ours.text if r.ours else "",
                value,
                "" if r.ours is None else str(r.ours.complete).lower(),
                c.authors_code.text if c.authors_code else "",
                repr(c.authors_code.value) if c.authors_code else "",
                "" if b is None else repr(b.fraction),
                r.verdict,
                " ".join(r.ours.commits) if r.ours else "",
                c.study or (c.plan.study if c.plan is not None else ""),
                c.record or "",
            ]
        )
    return buf.getvalue()


def write_papers(claims_path: Path, out: Path, base: Path, command: str) -> tuple[list[Row], list[Path]]:
    """Evaluate the claims file and write README.md and claims.csv into `out`."""
    claims = load_claims(claims_path)
    rows = evaluate(claims, base)
    out.mkdir(parents=True, exist_ok=True)
    try:
        source = str(claims_path.resolve().relative_to(base.resolve()))
    except ValueError:
        source = str(claims_path)
    files = [(out / "README.md", markdown(claims, rows, command, source)), (out / "claims.csv", csv_text(rows))]
    for path, text in files:
        path.write_text(text)
    return rows, [p for p, _ in files]
