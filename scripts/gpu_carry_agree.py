"""The persistent kernel against the batch kernel and the CPU loop over a language model's evaluation:
B sequences, windows of T steps, the state carried across windows (`forward_carry`), no gradient,
for as many windows as an evaluation of 20,000 tokens at batch 10 runs. A kernel bug that shows only
at LM shapes (one partial batch tile, a long carried state) would show here as a difference that
jumps; float32 rounding alone grows smoothly. Usage: python3 scripts/gpu_carry_agree.py [d] [B] [T] [windows]
"""

from __future__ import annotations

import os
import sys

import torch

import units

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run in Triton's interpreter


def carried(unit, xs):
    carry, outs = None, []
    with torch.no_grad():
        for x in xs:
            out, carry = unit.forward_carry(x, carry)
            outs.append(out)
    return torch.cat(outs, 1)


def main() -> None:
    d, B, T, windows = (int(a) for a in (sys.argv[1:] + ["1024", "10", "35", "57"][len(sys.argv) - 1 :]))
    for name in ("tpru", "tpru-mod3"):
        torch.manual_seed(0)
        unit = units.lookup(name)(d, d, roles=d, impl="triton").to(DEVICE)
        gen = torch.Generator().manual_seed(1)
        xs = [torch.randn(B, T, d, generator=gen).to(DEVICE) for _ in range(windows)]
        got = {}
        for kernel in ("persistent", "batch"):
            os.environ["TPRBENCH_TRITON_KERNEL"] = kernel
            got[kernel] = carried(unit, xs)
            print(name, kernel, "ran", unit.last_recurrence)
        reference = units.lookup(name)(d, d, roles=d, impl="fused")
        reference.load_state_dict({k: v.cpu() for k, v in unit.state_dict().items()})
        got["cpu float64"] = carried(reference.double(), [x.cpu().double() for x in xs])
        cpu = got["cpu float64"]
        for kernel in ("persistent", "batch"):
            diff = (got[kernel].cpu().double() - cpu).abs().amax(dim=(0, 2))  # per step
            per_window = diff.view(windows, T).amax(1)
            print(
                f"{name} {kernel} vs CPU float64: max |diff| per window (first 5, last 5):",
                [f"{v:.1e}" for v in per_window[:5].tolist()],
                [f"{v:.1e}" for v in per_window[-5:].tolist()],
                f"| max |state| {cpu.abs().max().item():.3g}",
            )
        same = torch.equal(got["persistent"], got["batch"])
        print(name, "persistent == batch bit for bit:", same, "| max |diff|", (got["persistent"] - got["batch"]).abs().max().item())


if __name__ == "__main__":
    main()
