"""Compile the TPRU Triton kernels for an NVIDIA target with no GPU and print what ptxas reports.

    .venv/bin/python scripts/triton_compile_report.py [--arch 90] [--dims 64,256,512,1024]

One row per (d, variant, direction) at the benchmark's shapes (roles = d): which kernel the
launcher picks, registers per thread, spill stores, shared memory per block. This checks that the
kernels build and fit a GPU; it measures nothing about speed (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse

from units.tpru_triton import DEFAULT_CONFIG, Layout, compile_report

# (label, slices, folded, has V_b, ReLU², tanh): what `tpru`, `tpru-mod3`, `tpru-v1` and `tpru[slices=8]` run
VARIANTS = [
    ("tpru", 1, True, True, True, False),
    ("tpru-v1", 1, True, False, True, True),
    ("tpru-mod3", 1, True, True, False, False),
    ("tpru[slices=8]", 8, False, True, True, False),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="SM version (90 = H100/H200, 80 = A100)")
    parser.add_argument("--dims", default="64,256,512,1024")
    args = parser.parse_args()
    print("| d | unit | direction | kernel | registers | spill stores (bytes) | shared memory (bytes) |")
    print("|---:|:---|:---|:---|---:|---:|---:|")
    for d in (int(x) for x in args.dims.split(",")):
        for label, k, folded, has_vb, relu2, tanh in VARIANTS:
            rows = d + k * d if folded else (2 * d if has_vb else d)
            layout = Layout(d, d, k, rows, folded, relu2, tanh, "tf32", DEFAULT_CONFIG)
            for direction in ("forward", "backward"):
                r = compile_report(layout, direction, arch=args.arch)
                print(
                    f"| {d} | `{label}` | {direction} | {r['kernel']} | {r['registers']} | {r['spill_stores']} | {r['shared_bytes']:,} |", flush=True
                )


if __name__ == "__main__":
    main()
