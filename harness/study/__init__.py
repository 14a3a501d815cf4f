"""Study files (TOML) → a validated `Study` → `Cell`s with stable ids.

    study = load_study("studies/quickstart.toml")     # raises StudyError (one line per problem)
    cells = expand(study)                              # task × arch × dim × input_dim × unit
    cells = filter_cells(cells, ["unit=tpru*", "dim=64"])

Schema (every table rejects unknown keys, with a did-you-mean; see docs/study-files.md)::

    [study]
    name = "quickstart"      # [A-Za-z0-9_.-]+; default: the file name without .toml
    description = ""
    trials = 2               # Optuna trials per cell (search phase), >= 0; 0 = no search, use the defaults
    seeds = 3                # final-phase runs per cell with the best parameters, >= 0 (seeds 0..n-1)
    epochs = 3               # required, >= 1
    metric = "valid_acc"     # optional; default: valid_<the adapter's `metric`>; must be a valid_<name> the task logs
    direction = "maximize"   # optional; default: the direction the task declares for that metric
    deterministic = true     # bitwise-reproducible kernels (not hashed: it does not change what is measured)

    [[tasks]]                # one or more
    name = "logic"           # a registered task (tasks.registry.get_task)
    label = "logic"          # optional, default = name; must be unique; used in cell labels
    data = "generated"       # "generated", a path, "~/…" or "${TPRBENCH_DATA}/…" (env vars expanded)
    units = ["tprn*"]        # optional: only the matrix units matching these globs (as --only unit=); default all
    [tasks.options]          # validated by the task adapter's `Options` pydantic model (defaults filled)

    [matrix]
    arch = ["plain"]         # a name or a list; each in every task's `archs`; default: each task's first arch
    dim = [64, 128]          # hidden sizes d (an int or a list); required unless every unit's options fix
                             # its size (tpr3: entity·relation·entity), which is then the cell's d
    input_dim = 300          # optional: embedding sizes d' (an int or a list); default: = dim
    units = ["lstm", "tpru[roles=32]"]   # unit specs
    [[matrix.grid]]          # a unit spec × the product of option lists (scalars count as one-item lists)
    unit = "tpru"
    roles = [8, 32]
    slices = [1, 8]

    Several `[[matrix]]` tables (instead of one `[matrix]`) each cross their own archs × dims ×
    units, and the study is their union: e.g. TPR-RNN with its own unit next to baselines that
    share another architecture and size. The same cell twice is an error.

    [search]                 # see harness/study/search_space.py: fixed values or distributions; names are
    lr = { log_uniform = [1e-4, 1e-2] }   # tasks.hparams.HParams fields (plus the task's own), checked here
    [search.defaults]        # optional: values for study.trials = 0

    [pruner]
    kind = "median"          # none | median | hyperband | successive_halving
    startup_trials = 5       # median only
    warmup_epochs = 0        # median only
    min_epochs = 1           # hyperband / successive_halving
    reduction_factor = 3     # hyperband / successive_halving

    [resources]
    cpus = 1.0               # per trial, > 0 (a fraction below 1 or a whole number, as Ray requires)
    gpus = 0.0               # per trial, >= 0 (0.25 packs four trials on one GPU)
    max_concurrent = 0       # 0 = as many as the cluster fits
    retries = 3              # Ray task retries for lost workers

Study files never execute code: every value is data. The single way a study file can load
code is a unit named by import path (`units = ["mypkg.cells:MyCell[k=3]"]`), which
`units.resolve` imports to check its options — the same thing `tprbench units` does with
that spec.

Cell ids: 12 hex chars of sha256 over canonical JSON of what affects a run's result — task
name, the task options that differ from their defaults, data *as written* (so
`${TPRBENCH_DATA}/x` gives the same id on a laptop and on a cluster), arch, the unit spec with
its non-default options (`tpru` = `tpru[roles=64]`; an option added to a unit or task later,
with a default, changes no existing id), dim, input_dim, epochs, the
normalised search space (defaults included), metric and direction. Not the study name,
trials, seeds, pruner or resources: raising trials or seeds continues the same cells, and two
studies that share a cell share its id.

The package, in the order its modules import each other:

- `search_space`: the `[search]` table → a normalised space; Optuna suggestions and pruners.
- `schema`: the file's tables as strict pydantic models, `StudyError`, and pydantic's errors in
  plain words with key paths.
- `cells`: the validated `Study`, its `Cell`s and their ids (`ID_VERSION`), `expand` (a study →
  its cells) and the `--only` filters.
- `load`: text → `Study` (`parse_study`, `load_study`): every table resolved and checked against
  the task and unit registries, each problem one line; `select` (a study file and `--only`
  patterns → the study and the cells they keep).

Importers name the module that defines what they use (`from harness.study.load import
load_study`); this `__init__` re-exports nothing, so importing the package costs nothing.
"""
