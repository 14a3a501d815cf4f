"""The driver's one error type: bad input to `tprbench run` or a cluster that cannot run the study.

Its own module because the Ray start-up, the driver loop and the benchmarks all raise it and
none of them should import another to get it. The CLI prints it as one line and exits 2.
"""

from __future__ import annotations


class RunnerError(RuntimeError):
    user_error = True
