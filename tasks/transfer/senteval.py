"""SentEval transfer evaluation of a frozen sentence encoder, following SentEval's protocol.

    evaluate(encode, task_path=None, tasks=None, *, kfold=10, seed=1111, batch_size=128,
             prepare=None, use_senteval=None, n_jobs=1, max_iter=100) -> dict[str, dict]

``encode(sentences) -> np.ndarray [len(sentences), dim]`` receives a batch of sentences as token
lists (SentEval's batcher convention: the downstream files are already tokenised); join them
with spaces if the encoder wants strings. ``prepare(sentences)``, if given, is called once per
task with all its sentences (SentEval's `prepare`, e.g. to build a vocabulary).

When the real ``senteval`` package is importable (and ``use_senteval`` is not False) it runs
the evaluation (``senteval.engine.SE`` with ``usepytorch=False``) and its results are mapped to
the schema below. SentEval reads ``<task_path>/downstream/<Task>``: we pass the parent of a
folder named ``downstream``, or a temporary folder whose ``downstream`` links to ours.

Otherwise the built-in evaluator reproduces SentEval's ``usepytorch=False`` protocol (PROTOCOL
below names it in report headers). Logistic regression is scikit-learn's liblinear, one-vs-rest
for more than two classes, fitted from scratch for every C: what SentEval's
``LogisticRegression(C=reg, random_state=seed)`` was with the scikit-learn of its release
(default solver liblinear, multi_class ovr, until 0.22), with SentEval's C grids:

- MR, CR, SUBJ, MPQA: outer stratified k-fold (shuffle, seed 1111); inside each training part an
  inner stratified k-fold picks C from 2^-2..2^3; refit on the training part, test on the held-out
  fold; acc = mean over folds (SentEval's InnerKFoldClassifier).
- TREC, MRPC: stratified k-fold on train picks C from 2^-1..2^5, refit on all of train, test on
  test (KFoldClassifier). MRPC features [|u-v|; u*v], reports acc and F1.
- SST2, SST5, SICKEntailment: C from 2^-2..2^3 by dev accuracy, refit on train, test
  (SplitClassifier). SICK-E features [|u-v|; u*v].
- SICKRelatedness, STSBenchmark: SentEval's RelatednessPytorch: features [|u-v|; u*v], a linear
  layer + softmax over the score classes 1..5 (both tasks, as SentEval: STS-B's 0..5 scores are
  encoded with SentEval's own rule, so a score below 1 puts only its fraction on class 1), trained
  with Adam on MSE against that "soft" encoding, 50-epoch rounds, early stopping on dev **Pearson**
  (stop at the 4th round without improvement), prediction = expected score over 1..5.
  STSBenchmark also reports the unsupervised cosine similarity correlations on test
  (``cosine_pearson``, ``cosine_spearman``).
- STS12–16: cosine similarity of u and v per pair, Pearson and Spearman per sub-dataset; the
  headline ``pearson``/``spearman`` is the mean over sub-datasets weighted by their sizes
  (SentEval's ``wmean``); ``pearson_mean`` (unweighted, SentEval's ``mean``) and ``pearson_all``
  (all pairs pooled; built-in only) are reported too. Pairs without a gold score are dropped.

Result schema per task (accuracies in percent, as SentEval reports them; correlations in
[-1, 1]): classification ``{acc, devacc, n_train, n_dev?, n_test}`` (+ ``f1`` for MRPC; for the
cross-validated tasks n_train = n_test = the number of examples, each tested once);
relatedness ``{pearson, spearman, mse, dev_pearson, n_train, n_dev, n_test}``;
STS ``{pearson, spearman, pearson_mean, spearman_mean, pearson_all, spearman_all, n_train: 0,
n_test, datasets: {name: {pearson, spearman, n}}}``. Every task also has ``seconds`` (wall time).

The classifier loops are written out (not LogisticRegressionCV) to keep SentEval's exact grids,
fold seeds and first-best tie-break on scores rounded to 0.01 %, and because
LogisticRegressionCV's arguments are mid-deprecation across the scikit-learn versions we support.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .senteval_data import TASKS, Split, TaskData, load_task, resolve_task_path

Encoder = Callable[[list], np.ndarray]

DEFAULT_TASKS = TASKS
PROTOCOL = (
    "SentEval usepytorch=False protocol; logistic regression = scikit-learn liblinear (one-vs-rest), "
    "fitted from scratch per C; SICK-R/STS-B: classes 1..5, early stopping on dev Pearson"
)
INNER_REGS = [2.0**t for t in range(-2, 4)]  # SentEval InnerKFoldClassifier / SplitClassifier, usepytorch=False
KFOLD_REGS = [2.0**t for t in range(-1, 6)]  # SentEval KFoldClassifier, usepytorch=False


def evaluate(
    encode: Encoder,
    task_path: str | Path | None = None,
    tasks: Sequence[str] | None = None,
    *,
    kfold: int = 10,
    seed: int = 1111,
    batch_size: int = 128,
    prepare: Callable[[list], None] | None = None,
    use_senteval: bool | None = None,
    n_jobs: int = 1,
    max_iter: int = 100,
) -> dict[str, dict]:
    """Evaluate `encode` on SentEval tasks; returns task -> metrics (see the module docstring).

    task_path: SentEval's data/downstream folder (default $TPRBENCH_DATA/senteval).
    tasks: names from `DEFAULT_TASKS` (all of them by default).
    kfold: folds for the cross-validated tasks (SentEval's examples use 10; its engine default is 5).
    use_senteval: True = require the `senteval` package, False = built-in, None = package if importable.
    n_jobs: parallel folds for the built-in classifiers (joblib); results do not depend on it.
    max_iter: lbfgs iterations per logistic-regression fit (scikit-learn's default, as SentEval).
    """
    base = resolve_task_path(task_path)
    names = list(tasks) if tasks is not None else list(DEFAULT_TASKS)
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown SentEval task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    if use_senteval is not False:
        try:
            import senteval  # noqa: F401
        except ImportError:
            if use_senteval:
                raise ImportError(
                    "use_senteval=True but the senteval package is not importable (pip install git+https://github.com/facebookresearch/SentEval)"
                ) from None
        else:
            return _evaluate_with_senteval(encode, base, names, kfold, seed, batch_size, prepare)
    out = {}
    for name in names:
        start = time.perf_counter()
        data = load_task(name, base)
        if prepare is not None:
            prepare(_all_sentences(data))
        result = _RUNNERS[_kind(name)](data, encode, kfold=kfold, seed=seed, batch_size=batch_size, n_jobs=n_jobs, max_iter=max_iter)
        result["seconds"] = round(time.perf_counter() - start, 2)
        out[name] = result
    return out


# ------------------------------------------------------------------------------------ the real package


def senteval_task_path(base: Path, scratch: Path) -> Path:
    """What SentEval's `task_path` must be for our `base` folder: SentEval opens
    `<task_path>/downstream/<Task>` (engine.py), so the parent of a folder named `downstream`,
    else `scratch` with a link `scratch/downstream → base`."""
    if base.name == "downstream":
        return base.parent
    link = scratch / "downstream"
    link.symlink_to(base.resolve(), target_is_directory=True)
    return scratch


def _evaluate_with_senteval(encode, base: Path, names, kfold, seed, batch_size, prepare) -> dict[str, dict]:
    """Run facebookresearch/SentEval itself and map its results to our schema
    (tests/fake_senteval follows SentEval's result layout)."""
    import tempfile

    import senteval.engine

    def batcher(_params, batch):
        return np.asarray(encode(batch))

    def prep(_params, samples):
        if prepare is not None:
            prepare(samples)

    with tempfile.TemporaryDirectory(prefix="tprbench-senteval-") as scratch:
        params = {
            "task_path": str(senteval_task_path(base, Path(scratch))),
            "usepytorch": False,
            "kfold": kfold,
            "seed": seed,
            "batch_size": batch_size,
            "classifier": {"nhid": 0},
        }
        raw = senteval.engine.SE(params, batcher, prep).eval(list(names))
    return {name: _from_senteval(name, r) for name, r in raw.items()}


def _from_senteval(name: str, r: dict) -> dict:
    """One task's SentEval result → our schema. SentEval's layouts (senteval/*.py):
    STS12–16 `{<dataset>: {pearson: (r, p), spearman: (r, p), nsamples}, all: {pearson: {mean, wmean},
    spearman: {mean, wmean}}}`; SICK-R/STS-B `{devpearson, pearson, spearman, mse, yhat, ndev, ntest}`;
    classification `{devacc, acc, ndev, ntest}` (+ `f1` for MRPC)."""
    if name.startswith("STS") and name != "STSBenchmark":
        subsets = {k: v for k, v in r.items() if k != "all"}
        return {
            "pearson": float(r["all"]["pearson"]["wmean"]),
            "spearman": float(r["all"]["spearman"]["wmean"]),
            "pearson_mean": float(r["all"]["pearson"]["mean"]),
            "spearman_mean": float(r["all"]["spearman"]["mean"]),
            "n_train": 0,
            "n_test": int(sum(v["nsamples"] for v in subsets.values())),
            "datasets": {
                k: {"pearson": float(v["pearson"][0]), "spearman": float(v["spearman"][0]), "n": int(v["nsamples"])} for k, v in subsets.items()
            },
        }
    if "pearson" in r:
        return {
            "pearson": float(r["pearson"]),
            "spearman": float(r["spearman"]),
            "mse": float(r["mse"]),
            "dev_pearson": float(r["devpearson"]),
            "n_dev": int(r["ndev"]),
            "n_test": int(r["ntest"]),
        }
    out = {"acc": float(r["acc"]), "devacc": float(r["devacc"]), "n_dev": int(r["ndev"]), "n_test": int(r["ntest"])}
    if "f1" in r:
        out["f1"] = float(r["f1"])
    return out


# ------------------------------------------------------------------------------------ encoding


def _all_sentences(data: TaskData) -> list:
    out = []
    for split in data.splits.values():
        out.extend(split.a)
        if split.b is not None:
            out.extend(split.b)
    return out


def embed(encode: Encoder, sentences: list, batch_size: int = 128) -> np.ndarray:
    """Encode in batches of similar length (SentEval sorts by length), rows in the input order."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    parts, out = [], None
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = [sentences[i] for i in idx]
        emb = np.asarray(encode(batch))
        if emb.ndim != 2 or emb.shape[0] != len(batch):
            raise ValueError(f"encode returned shape {emb.shape} for a batch of {len(batch)} sentences; expected [{len(batch)}, dim]")
        parts.append((idx, emb))
    if not parts:
        return np.zeros((0, 0), dtype=np.float32)
    dim = parts[0][1].shape[1]
    out = np.empty((len(sentences), dim), dtype=np.float32)
    for idx, emb in parts:
        out[idx] = emb
    return out


def _pair_features(encode, split: Split, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    u = embed(encode, split.a, batch_size)
    v = embed(encode, split.b, batch_size)
    return u, v


def _sorted(split: Split) -> Split:
    """The split in SentEval's order: by (len a, label) or (len a, len b, label), stable.

    SentEval sorts every task like this before embedding (less padding), and its fold splits
    (shuffle with a fixed seed) act on that order, so keeping it keeps the folds comparable.
    """
    if split.b is None:
        order = sorted(range(len(split)), key=lambda i: (len(split.a[i]), split.y[i]))
        return Split([split.a[i] for i in order], None, split.y[order])
    order = sorted(range(len(split)), key=lambda i: (len(split.a[i]), len(split.b[i]), split.y[i]))
    return Split([split.a[i] for i in order], [split.b[i] for i in order], split.y[order])


def _absdiff_prod(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.c_[np.abs(u - v), u * v]


# ------------------------------------------------------------------------------------ classifiers


def _quiet_single_thread():
    """Context for one small LR fit: no ConvergenceWarning (SentEval ignores it too) and one
    BLAS/OpenMP thread. These fits are small; per-call BLAS threading made them 5-10x slower on
    the 2-core CI machines (measured). Parallelism comes from running folds in parallel (n_jobs)."""
    import contextlib

    from threadpoolctl import threadpool_limits

    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    stack.enter_context(threadpool_limits(limits=1))
    return stack


def logistic_regression(reg: float, seed: int, max_iter: int, n_classes: int):
    """SentEval's `LogisticRegression(C=reg, random_state=seed)` as it ran with the scikit-learn of
    SentEval's release: liblinear, one-vs-rest (newer scikit-learn needs the OvR wrapper spelled out)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    clf = LogisticRegression(C=reg, solver="liblinear", random_state=seed, max_iter=max_iter)
    return clf if n_classes <= 2 else OneVsRestClassifier(clf)


def _lr_scores(X_tr, y_tr, X_te, y_te, regs, seed, max_iter) -> list[float]:
    """Test accuracy (percent) for each C in `regs`, each fitted from scratch (as SentEval)."""
    return [100.0 * _fit_lr(X_tr, y_tr, reg, seed, max_iter).score(X_te, y_te) for reg in regs]


def _fit_lr(X, y, reg, seed, max_iter):
    clf = logistic_regression(reg, seed, max_iter, len(np.unique(y)))
    with _quiet_single_thread():
        clf.fit(X, y)
    return clf


def _cv_pick(X, y, regs, k, seed, max_iter, n_jobs) -> tuple[float, float]:
    """Mean k-fold accuracy per C; returns (best C, its score) with SentEval's tie-break."""
    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(X, y))
    per_fold = Parallel(n_jobs=n_jobs)(delayed(_lr_scores)(X[tr], y[tr], X[te], y[te], regs, seed, max_iter) for tr, te in folds)
    means = [round(float(np.mean(s)), 2) for s in zip(*per_fold)]
    best = int(np.argmax(means))
    return regs[best], means[best]


def _inner_fold(X, y, tr, te, k, seed, max_iter) -> tuple[float, float]:
    reg, dev = _cv_pick(X[tr], y[tr], INNER_REGS, k, seed, max_iter, n_jobs=1)
    clf = _fit_lr(X[tr], y[tr], reg, seed, max_iter)
    return dev, round(100.0 * clf.score(X[te], y[te]), 2)


def inner_kfold(X, y, k=10, seed=1111, max_iter=100, n_jobs=1) -> dict:
    """SentEval's InnerKFoldClassifier: nested stratified k-fold, C chosen inside each outer fold.

    `seed` seeds the outer and inner fold splits (SentEval hard-codes 1111 there, our default).
    """
    from joblib import Parallel, delayed
    from sklearn.model_selection import StratifiedKFold

    outer = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(X, y)
    res = Parallel(n_jobs=n_jobs)(delayed(_inner_fold)(X, y, tr, te, k, seed, max_iter) for tr, te in outer)
    dev, test = zip(*res)
    return {"devacc": round(float(np.mean(dev)), 2), "acc": round(float(np.mean(test)), 2)}


def kfold_then_test(X, y, X_test, y_test, k=10, seed=1111, max_iter=100, n_jobs=1) -> dict:
    """SentEval's KFoldClassifier: k-fold on train picks C, refit on train, score on test."""
    reg, cv = _cv_pick(X, y, KFOLD_REGS, k, seed, max_iter, n_jobs)
    clf = _fit_lr(X, y, reg, seed, max_iter)
    yhat = clf.predict(X_test)
    return {"devacc": cv, "acc": round(100.0 * float(np.mean(yhat == y_test)), 2), "yhat": yhat}


def split_classifier(X, y, X_dev, y_dev, X_test, y_test, seed=1111, max_iter=100) -> dict:
    """SentEval's SplitClassifier: C by dev accuracy, refit on train, score on test."""
    scores = [round(s, 2) for s in _lr_scores(X, y, X_dev, y_dev, INNER_REGS, seed, max_iter)]
    best = int(np.argmax(scores))
    clf = _fit_lr(X, y, INNER_REGS[best], seed, max_iter)
    return {"devacc": scores[best], "acc": round(100.0 * clf.score(X_test, y_test), 2)}


# ------------------------------------------------------------------------------------ relatedness


def encode_scores(y: np.ndarray, lo: int = 1, hi: int = 5) -> np.ndarray:
    """SentEval's soft label encoding (sick.py `encode_labels`, Tai et al.) over classes lo..hi:
    class floor(s) gets floor(s) − s + 1, class floor(s) + 1 gets s − floor(s), where they exist.
    A score in [lo, hi] has mass 1; SentEval also feeds STS-B's scores below 1 through it, which
    leaves only s on class 1 (kept: numbers then compare with SentEval's)."""
    classes = np.arange(lo, hi + 1)
    Y = np.zeros((len(y), len(classes)), dtype=np.float32)
    for j, s in enumerate(np.asarray(y, dtype=np.float64)):
        f = np.floor(s)
        Y[j, classes == f + 1] = s - f
        Y[j, classes == f] = f - s + 1
    return Y


def relatedness_regression(X, y, X_dev, y_dev, X_test, y_test, lo=1, hi=5, seed=1111, batch_size=64, max_epoch=1000, chunk=50) -> dict:
    """SentEval's RelatednessPytorch (linear + softmax over score classes, MSE, Adam, early stop on dev Pearson)."""
    import torch

    r = np.arange(lo, hi + 1, dtype=np.float32)
    threads = torch.get_num_threads()
    # One thread: ~35k tiny steps, where intra-op threading only adds overhead (10x slower with 2
    # threads on the 2-core CI machines, measured). Restored afterwards.
    torch.set_num_threads(1)
    try:
        return _relatedness_fit(torch, r, X, y, X_dev, y_dev, X_test, y_test, lo, hi, seed, batch_size, max_epoch, chunk)
    finally:
        torch.set_num_threads(threads)


def _relatedness_fit(torch, r, X, y, X_dev, y_dev, X_test, y_test, lo, hi, seed, batch_size, max_epoch, chunk):
    from scipy.stats import pearsonr, spearmanr

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        rng = np.random.RandomState(seed)
        Xt = torch.as_tensor(X, dtype=torch.float32)
        Yt = torch.as_tensor(encode_scores(y, lo, hi))
        model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], len(r)), torch.nn.Softmax(dim=-1))
        opt = torch.optim.Adam(model.parameters(), weight_decay=0.0)
        loss_fn = torch.nn.MSELoss(reduction="sum")  # SentEval sets size_average=False

        def predict(A):
            with torch.no_grad():
                return model(torch.as_tensor(A, dtype=torch.float32)).numpy() @ r

        best, best_state, bad, epoch = -1.0, None, 0, 0
        while epoch <= max_epoch:
            model.train()
            for _ in range(chunk):
                perm = torch.as_tensor(rng.permutation(len(Xt)))
                for i in range(0, len(Xt), batch_size):
                    idx = perm[i : i + batch_size]
                    loss = loss_fn(model(Xt[idx]), Yt[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            epoch += chunk
            pr = pearsonr(predict(X_dev), y_dev)[0]  # SentEval: "early stop on Pearson"
            pr = 0.0 if pr != pr else float(pr)
            if pr > best:
                best, best_state = pr, copy.deepcopy(model.state_dict())
            else:
                if bad >= 3:  # SentEval: the counter is never reset; the 4th non-improving round stops
                    break
                bad += 1
        model.load_state_dict(best_state)
        yhat = predict(X_test)
    return {
        "pearson": float(pearsonr(yhat, y_test)[0]),
        "spearman": float(spearmanr(yhat, y_test)[0]),
        "mse": float(np.mean((yhat - y_test) ** 2)),
        "dev_pearson": best,
        "epochs": epoch,
    }


def _cosine(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    nu = np.linalg.norm(u, axis=1)
    nv = np.linalg.norm(v, axis=1)
    denom = nu * nv
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.sum(u * v, axis=1) / denom
    return np.where(denom > 0, sim, 0.0)


def _corr(a, b) -> tuple[float, float]:
    from scipy.stats import pearsonr, spearmanr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input -> nan, reported as such
        return float(pearsonr(a, b)[0]), float(spearmanr(a, b)[0])


# ------------------------------------------------------------------------------------ task runners


def _kind(name: str) -> str:
    if name in ("MR", "CR", "SUBJ", "MPQA"):
        return "binary"
    if name in ("TREC", "MRPC"):
        return "kfold"
    if name in ("SST2", "SST5", "SICKEntailment"):
        return "split"
    if name in ("SICKRelatedness", "STSBenchmark"):
        return "relatedness"
    return "sts"


def _run_binary(data: TaskData, encode, *, kfold, seed, batch_size, n_jobs, max_iter) -> dict:
    split = _sorted(data["all"])
    X = embed(encode, split.a, batch_size)
    res = inner_kfold(X, split.y, k=kfold, seed=seed, max_iter=max_iter, n_jobs=n_jobs)
    return {**res, "n_train": len(split), "n_test": len(split)}


def _run_kfold(data: TaskData, encode, *, kfold, seed, batch_size, n_jobs, max_iter) -> dict:
    tr, te = _sorted(data["train"]), _sorted(data["test"])
    if tr.b is None:  # TREC
        X, Xt = embed(encode, tr.a, batch_size), embed(encode, te.a, batch_size)
    else:  # MRPC
        X = _absdiff_prod(*_pair_features(encode, tr, batch_size))
        Xt = _absdiff_prod(*_pair_features(encode, te, batch_size))
    res = kfold_then_test(X, tr.y, Xt, te.y, k=kfold, seed=seed, max_iter=max_iter, n_jobs=n_jobs)
    yhat = res.pop("yhat")
    out = {**res, "n_train": len(tr), "n_test": len(te)}
    if data.name == "MRPC":
        from sklearn.metrics import f1_score

        out["f1"] = round(100.0 * float(f1_score(te.y, yhat)), 2)
    return out


def _run_split(data: TaskData, encode, *, kfold, seed, batch_size, n_jobs, max_iter) -> dict:
    feats = {}
    for s in ("train", "dev", "test"):
        sp = data.splits[s] = _sorted(data[s])
        feats[s] = embed(encode, sp.a, batch_size) if sp.b is None else _absdiff_prod(*_pair_features(encode, sp, batch_size))
    res = split_classifier(feats["train"], data["train"].y, feats["dev"], data["dev"].y, feats["test"], data["test"].y, seed=seed, max_iter=max_iter)
    return {**res, "n_train": len(data["train"]), "n_dev": len(data["dev"]), "n_test": len(data["test"])}


def _run_relatedness(data: TaskData, encode, *, kfold, seed, batch_size, n_jobs, max_iter) -> dict:
    lo, hi = 1, 5  # SentEval: nclasses 5, r = 1..5 for SICK-R and STS-B alike
    for s in ("train", "dev", "test"):
        data.splits[s] = _sorted(data[s])
    uv = {s: _pair_features(encode, data[s], batch_size) for s in ("train", "dev", "test")}
    res = relatedness_regression(
        _absdiff_prod(*uv["train"]),
        data["train"].y,
        _absdiff_prod(*uv["dev"]),
        data["dev"].y,
        _absdiff_prod(*uv["test"]),
        data["test"].y,
        lo=lo,
        hi=hi,
        seed=seed,
    )
    out = {**res, "n_train": len(data["train"]), "n_dev": len(data["dev"]), "n_test": len(data["test"])}
    if data.name == "STSBenchmark":
        out["cosine_pearson"], out["cosine_spearman"] = _corr(_cosine(*uv["test"]), data["test"].y)
    return out


def _run_sts(data: TaskData, encode, *, kfold, seed, batch_size, n_jobs, max_iter) -> dict:
    per, sys_all, gs_all = {}, [], []
    for name, sp in data.splits.items():
        sims = _cosine(*_pair_features(encode, sp, batch_size))
        p, s = _corr(sims, sp.y)
        per[name] = {"pearson": p, "spearman": s, "n": len(sp)}
        sys_all.append(sims)
        gs_all.append(sp.y)
    w = np.array([v["n"] for v in per.values()], dtype=np.float64)
    ps = np.array([v["pearson"] for v in per.values()])
    ss = np.array([v["spearman"] for v in per.values()])
    p_all, s_all = _corr(np.concatenate(sys_all), np.concatenate(gs_all))
    return {
        "pearson": float(np.average(ps, weights=w)),
        "spearman": float(np.average(ss, weights=w)),
        "pearson_mean": float(ps.mean()),
        "spearman_mean": float(ss.mean()),
        "pearson_all": p_all,
        "spearman_all": s_all,
        "n_train": 0,
        "n_test": int(w.sum()),
        "datasets": per,
    }


_RUNNERS = {"binary": _run_binary, "kfold": _run_kfold, "split": _run_split, "relatedness": _run_relatedness, "sts": _run_sts}
