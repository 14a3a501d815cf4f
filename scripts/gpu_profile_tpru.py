"""One TPRU forward + backward on the GPU, for a profiler to watch (`scripts/gpu_check.sh profile`).

Usage: python3 scripts/gpu_profile_tpru.py D B T [SPEC]   (default SPEC `tpru`, roles = D)

Two warm-up steps compile the kernels first; the profiled step is the third, between
cudaProfilerStart/Stop, so `ncu --profile-from-start off` sees only it.
"""

from __future__ import annotations

import sys

import torch

import units
from harness.bench.units import _batch, sized_spec


def main() -> None:
    d, b, t = (int(v) for v in sys.argv[1:4])
    raw = sys.argv[4] if len(sys.argv) > 4 else "tpru"
    spec, hidden = sized_spec(raw, d)
    module = units.build(spec, d, hidden).cuda()
    x, mask = _batch(b, t, d, padded=False, device="cuda")  # bench units' own batch
    for i in range(3):
        if i == 2:
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        outputs, state = module(x, mask)[:2]
        (outputs.sum() + state.sum()).backward()
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled {spec} at d={d} B={b} T={t}")


if __name__ == "__main__":
    main()
