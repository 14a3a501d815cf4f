"""`tprbench gradients` and `tprbench interpret`: sources (tracked runs, unit specs), the runs
of the analyses over data, and their tables and figures. The measurements are tasks/analysis/."""
