"""Tune the persistent TPRU kernel's launch on a card: programs per SM, warps per program and tile sizes
(`PersistentConfig`), each against cuDNN's GRU in the same interleaved rounds (`scripts/gpu_check.sh tune`).

Usage: python3 scripts/gpu_tune_persist.py --out FILE.json [--device cuda] [--shapes D:B:T,...]
       [--slices-shapes D:B:T,...] [--pps 1,2,4,8] [--warps 4,8] [--tiles C:N,...] [--repeats 5]
       [--warmup 2] [--budget-s 240]

Why a script of its own, not `bench units`: the settings tuned here are `TritonConfig.persistent`, not
unit options, so each is put in place as tests/test_tpru_persist.py does (`tpru_triton.DEFAULT_CONFIG`,
which the autograd Function reads at every call), and the same module and batch are timed under every
setting. Per shape and setting it records: whether the persistent kernel ran (a grid that cannot be
co-resident falls back to the batch kernel: recorded as unfit, with the reason, and not timed), its
outputs and every gradient against the default setting's (float32 within the card tests' tolerance,
and float64 at one shape to rounding), and the median forward + backward ms and its median ratio to the
GRU of the same round. The JSON is rewritten after every case, so a run stopped at its limit keeps what
it measured. `--device cpu` is a dry run in Triton's interpreter (small shapes; `programs_per_sm` does not
apply there: the interpreter runs one program per tile).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import units  # noqa: E402
from harness.bench.units import _batch, _interleaved, recurrence_of, sized_spec  # noqa: E402
from units import tpru_persist, tpru_triton  # noqa: E402
from units.tpru_triton_layout import PersistentConfig, TritonConfig  # noqa: E402

RTOL32, ATOL32 = 1e-3, 1e-4  # as tests/test_tpru_triton.py on a card: atol of each tensor's scale
RTOL64 = 1e-9


def shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(v) for v in item.split(":")) for item in text.split(",") if item]


def settings(pps: list[int], warps: list[int], tiles: list[tuple[int, int]]) -> list[PersistentConfig]:
    """The default first (the reference of the agreement checks), then every combination."""
    default = PersistentConfig()
    grid = [PersistentConfig(block_c=c, block_n=n, programs_per_sm=p, num_warps=w) for (c, n), w, p in itertools.product(tiles, warps, pps)]
    return [default] + [s for s in grid if s != default]


def use(setting: PersistentConfig) -> None:
    tpru_triton.DEFAULT_CONFIG = TritonConfig(kernel="persistent", persistent=setting)


def results(module, x, mask) -> list[torch.Tensor]:
    """Outputs, final state and every gradient (parameters and input) of one forward + backward."""
    module.zero_grad(set_to_none=True)
    x.grad = None
    outputs, state = module(x, mask)[:2]
    (outputs.square().sum() + state.sum()).backward()
    grads = [p.grad.detach().clone() for p in module.parameters() if p.grad is not None]
    found = [outputs.detach().clone(), state.detach().clone(), *grads, x.grad.detach().clone()]
    module.zero_grad(set_to_none=True)
    x.grad = None
    return found


def worst(found: list[torch.Tensor], reference: list[torch.Tensor], rtol: float, atol_scale: float) -> tuple[bool, float]:
    """Whether every tensor agrees (|a - b| <= atol·scale + rtol·|b|), and the largest error / scale."""
    ok, largest = True, 0.0
    for a, b in zip(found, reference):
        scale = b.abs().max().item() or 1.0
        err = (a - b).abs()
        ok &= bool((err <= atol_scale * scale + rtol * b.abs()).all())
        largest = max(largest, err.max().item() / scale)
    return ok, largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--spec", default=None, help="default: tpru on cuda, tpru[impl=triton] on cpu")
    parser.add_argument("--shapes", default="256:64:50,512:64:50,1024:64:50,512:256:100,1024:256:100")
    parser.add_argument("--slices-shapes", default="512:64:50", help="shapes also run as slices=8")
    parser.add_argument("--float64-shape", default="512:64:50", help="the shape whose float64 result is checked per setting")
    parser.add_argument("--pps", default="1,2,4,8")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--tiles", default="16:16,32:32,16:32", help="block_c:block_n pairs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop starting new cases after this many seconds")
    args = parser.parse_args()
    device = args.device
    base = args.spec or ("tpru" if device.startswith("cuda") else "tpru[impl=triton]")
    grid = settings(
        [int(v) for v in args.pps.split(",")],
        [int(v) for v in args.warps.split(",")],
        [tuple(int(v) for v in t.split(":")) for t in args.tiles.split(",")],
    )
    cases = [(base, s) for s in shapes(args.shapes)] + [(_with_slices(base), s) for s in shapes(args.slices_shapes)]
    meta = dict(
        device=device,
        card=torch.cuda.get_device_name(0) if device.startswith("cuda") else "none (interpreter dry run)",
        sms=torch.cuda.get_device_properties(0).multi_processor_count if device.startswith("cuda") else None,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        triton=__import__("triton").__version__,
        repeats=args.repeats,
        warmup=args.warmup,
        protocol="forward + backward of outputs.sum() + state.sum(); median over rounds of (tpru / GRU of the same round)",
        command=" ".join(sys.argv),
    )
    record = dict(meta=meta, rows=[])
    started = time.perf_counter()
    torch.manual_seed(0)
    for raw, (d, b, t) in cases:
        spec, hidden = sized_spec(raw, d)
        module = units.build(spec, d, hidden).to(device)
        gru = units.build("gru", d, d).to(device)
        x, mask = _batch(b, t, d, padded=False, device=device)
        float64 = (d, b, t) == tuple(shapes(args.float64_shape)[0]) and raw == base
        reference = reference64 = None
        for setting in grid:
            if time.perf_counter() - started > args.budget_s:
                record["stopped"] = f"budget of {args.budget_s} s spent before {spec} at d={d} B={b} T={t}, {setting}"
                _write(args.out, record)
                print(record["stopped"])
                return
            row = dict(spec=spec, d=d, batch=b, seq=t, **{k: getattr(setting, k) for k in ("block_c", "block_n", "num_warps", "programs_per_sm")})
            use(setting)
            unfit_before = set(tpru_persist._UNFIT)
            tick = time.perf_counter()
            try:
                found = results(module, x, mask)
            except Exception as exc:  # noqa: BLE001 — a setting the kernel cannot take is recorded, not fatal
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                record["rows"].append(row)
                _write(args.out, record)
                print(_line(row))
                continue
            row["compile_and_first_s"] = round(time.perf_counter() - tick, 2)
            row["recurrence"] = recurrence_of(module)
            if row["recurrence"] != "triton/persistent":
                reasons = sorted({tpru_persist._UNFIT[key] for key in set(tpru_persist._UNFIT) - unfit_before})
                row["unfit"] = "; ".join(reasons) or f"ran {row['recurrence']}"
                record["rows"].append(row)
                _write(args.out, record)
                print(_line(row))
                continue
            if reference is None:
                reference = found
            row["agrees_f32"], row["max_err_f32"] = worst(found, reference, RTOL32, ATOL32)
            if float64:
                doubled = units.build(spec, d, hidden).to(device).double()
                doubled.load_state_dict(module.state_dict())
                x64 = x.detach().double().requires_grad_(True)
                found64 = results(doubled, x64, mask)
                reference64 = reference64 or found64
                row["agrees_f64"], row["max_err_f64"] = worst(found64, reference64, RTOL64, RTOL64)
            pair = [(SimpleNamespace(skipped=None), gru), (SimpleNamespace(skipped=None), module)]
            times = _interleaved(pair, x, mask, device, args.warmup, args.repeats, False, time.perf_counter)  # bench units' rounds
            failed = next((r.skipped for r, _ in pair if r.skipped), None)
            if failed:
                row["error"] = failed
                record["rows"].append(row)
                _write(args.out, record)
                print(_line(row))
                continue
            totals = [f + bwd for f, bwd in times[1]]
            gru_totals = [f + bwd for f, bwd in times[0]]
            row.update(
                forward_ms=round(statistics.median(s[0] for s in times[1]), 3),
                backward_ms=round(statistics.median(s[1] for s in times[1]), 3),
                total_ms=round(statistics.median(totals), 3),
                gru_ms=round(statistics.median(gru_totals), 3),
                ratio_to_gru=round(statistics.median(a / g for a, g in zip(totals, gru_totals)), 3),
            )
            record["rows"].append(row)
            _write(args.out, record)
            print(_line(row))
    record["seconds"] = round(time.perf_counter() - started, 1)
    _write(args.out, record)
    _summary(record["rows"])


def _with_slices(spec: str) -> str:
    return spec[:-1] + ",slices=8]" if spec.endswith("]") else spec + "[slices=8]"


def _write(path: str, record: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def _line(row: dict) -> str:
    setting = f"c{row['block_c']} n{row['block_n']} w{row['num_warps']} p{row['programs_per_sm']}"
    head = f"{row['spec']:<22} d={row['d']:<4} B={row['batch']:<3} T={row['seq']:<3} {setting}"
    if "unfit" in row or "error" in row:
        return f"{head}  {'UNFIT ' + row['unfit'] if 'unfit' in row else 'ERROR ' + row['error']}"[:300]
    f64 = f" f64 {row['agrees_f64']} {row['max_err_f64']:.1e}" if "agrees_f64" in row else ""
    return (
        f"{head}  {row['total_ms']:8.2f} ms  x GRU {row['ratio_to_gru']:6.2f}  (fwd {row['forward_ms']:.2f} bwd {row['backward_ms']:.2f}; "
        f"GRU {row['gru_ms']:.2f})  f32 {row['agrees_f32']} {row['max_err_f32']:.1e}{f64}  first {row['compile_and_first_s']} s"
    )


def _summary(rows: list[dict]) -> None:
    """Per shape: the default setting against the fastest one that agrees."""
    print("\nper shape: default -> best (x GRU)")
    keyed: dict[tuple, list[dict]] = {}
    for row in rows:
        keyed.setdefault((row["spec"], row["d"], row["batch"], row["seq"]), []).append(row)
    for key, group in keyed.items():
        timed = [r for r in group if "ratio_to_gru" in r and r["agrees_f32"] and r.get("agrees_f64", True)]
        if not timed:
            continue
        best = min(timed, key=lambda r: r["ratio_to_gru"])
        print(
            f"{key}: {timed[0]['ratio_to_gru']} -> {best['ratio_to_gru']} "
            f"(c{best['block_c']} n{best['block_n']} w{best['num_warps']} p{best['programs_per_sm']})"
        )


if __name__ == "__main__":
    main()
