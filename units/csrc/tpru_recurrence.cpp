// The TPRU time loop (forward and backward) in C++: the same computation as the Python loop in
// units/tpru_fused.py, without the Python interpreter between the ops of a step.
//
// Why: at d = 64 a step is ~10 small ops; from Python each costs a few microseconds of
// interpreter and dispatcher time, which is most of the step. Here a step is one matmul for
// b_{t-1} (plus one batched matmul for the unfolded slice path), one for the binding, and two hand-written loops over
// the batch that do all the elementwise work of the step in one pass each (gate input, ReLU²
// normalisation over roles, the lerp); sigmoid/tanh/softmax stay ATen calls (vectorised there).
// The backward walks time once, fused the same way, and forms every weight gradient after the
// loop as one large matmul. Built and loaded by units/tpru_ext.py (torch.utils.cpp_extension, once
// per machine); registered as torch.ops.tprbench.tpru_forward / tpru_backward.
//
// Arguments (time-major, as units/tpru_fused.py; gx and fx may be strided views, e.g. of batch-first
// tensors, as long as their last dimension is contiguous): gx [T,B,d], fx [T,B,k,N], W_rec [rows,d],
// R_slices/U_slices [k,s,N], c_b [k,N], c_x scalar, b0 [B,d]. `U_slices` empty = folded path
// (W_rec = [W_b; Uᵀ V_b], rows = d + kN); otherwise unfolded (W_rec = [W_b; V_b] or W_b).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

namespace {

constexpr double kNormEps = 1e-7;  // the authors' clamp (models/TPRU.py), as NORM_EPS in tpru_fused.py

// Rows per parallel chunk: at least ~32k elements of work (ATen's own grain), so small problems stay on one thread.
int64_t grain(int64_t per_row) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_row)); }

template <typename T>
inline T relu(T v) { return v < T(0) ? T(0) : v; }  // NaN stays NaN, as torch.relu

// out = a @ b (batched when 3-d) into a view: ATen writes strided rows in place (it wants an lvalue).
inline void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) {
  if (out.dim() == 3) at::bmm_out(out, a, b); else at::mm_out(out, a, b);
}

// Inner dimension contiguous (what the loops index with strides); copies only when it is not.
at::Tensor unit_inner(const at::Tensor& x) { return x.stride(-1) == 1 ? x : x.contiguous(); }

struct Dims {
  int64_t T, B, d, k, N, s, rows;
  bool folded, relu2, tanh_candidate;
};

// Per-row kernels: plain functions over restrict pointers so that g++ vectorises them.
template <typename scalar_t>
scalar_t relu2_row(scalar_t* __restrict__ sc, const scalar_t* __restrict__ cb, const scalar_t* __restrict__ xr,
                   scalar_t cx, scalar_t* __restrict__ fr, int64_t N) {
  scalar_t total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const scalar_t v = sc[n] + cb[n];  // f_b + c_b (kept for backward)
    sc[n] = v;
    const scalar_t a = relu(v) + relu(xr[n] + cx);
    fr[n] = a * a;  // f̃
  }
#pragma omp simd reduction(+ : total)
  for (int64_t n = 0; n < N; ++n) total += fr[n];
  return total;
}

template <typename scalar_t>
void lerp_row(const scalar_t* __restrict__ g, const scalar_t* __restrict__ b, const scalar_t* __restrict__ c,
              scalar_t* __restrict__ out, int64_t n_) {
  for (int64_t e = 0; e < n_; ++e) out[e] = b[e] + g[e] * (c[e] - b[e]);  // b_t = g b̃ + (1 − g) b_{t-1}
}

template <typename scalar_t, bool use_tanh>
void lerp_back_row(const scalar_t* __restrict__ go, scalar_t* __restrict__ carry, const scalar_t* __restrict__ g,
                   const scalar_t* __restrict__ c, const scalar_t* __restrict__ prev, scalar_t* __restrict__ dp,
                   scalar_t* __restrict__ dc, int64_t n_) {
  for (int64_t e = 0; e < n_; ++e) {
    const scalar_t dh = go[e] + carry[e];
    const scalar_t ge = g[e];
    dp[e] = dh * (c[e] - prev[e]) * ge * (1 - ge);
    dc[e] = use_tanh ? dh * ge * (1 - c[e] * c[e]) : dh * ge;
    carry[e] = dh * (1 - ge);
  }
}

// One step's lerp backward over every row and slice (both slice loops): ∂b_t (grad + carry) to the
// gate pre-activation, the candidate of slice j (stored [k, T, B, s]) and b_{t-1} (the carry).
template <typename scalar_t>
void lerp_back_step(const scalar_t* go, scalar_t* cr, const scalar_t* G, const scalar_t* cand0, const scalar_t* Pv,
                    scalar_t* dP, scalar_t* dcand0, int64_t B, int64_t T, int64_t t, int64_t k, int64_t d, int64_t s,
                    int64_t rows, bool tanh_candidate) {
  at::parallel_for(0, B, grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = i * d + j * s, cs = ((j * T + t) * B + i) * s;
        if (tanh_candidate)
          lerp_back_row<scalar_t, true>(go + r, cr + r, G + i * rows + j * s, cand0 + cs, Pv + r, dP + i * rows + j * s, dcand0 + cs, s);
        else
          lerp_back_row<scalar_t, false>(go + r, cr + r, G + i * rows + j * s, cand0 + cs, Pv + r, dP + i * rows + j * s, dcand0 + cs, s);
      }
    }
  });
}


template <typename scalar_t>
scalar_t dot_row(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b, int64_t N) {
  scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t n = 0; n < N; ++n) acc += a[n] * b[n];
  return acc;
}

template <typename scalar_t>
void relu2_back_row(const scalar_t* __restrict__ df, const scalar_t* __restrict__ sb, const scalar_t* __restrict__ xr,
                    scalar_t cx, scalar_t coef, scalar_t shift, scalar_t* __restrict__ db, scalar_t* __restrict__ dx,
                    int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    const scalar_t xv = xr[n] + cx;
    const scalar_t v = sb[n];
    const scalar_t da = (relu(v) + relu(xv)) * coef * (df[n] - shift);  // 2a/Σ · (∂f − shift)
    db[n] = v > 0 ? da : scalar_t(0);
    dx[n] = xv > 0 ? da : scalar_t(0);
  }
}

// Buffers (one layout for forward and backward):
//   outs [T,B,d]; pres [T,B,rows]: g_t in columns < d, then (folded) f_b + c_b or the softmax logits,
//   (unfolded) z_t = V_b b_{t-1}; cands and ∂cands [k,T,B,s] and fills [k,T,B,N] slice-major, so a
//   step's slices are one batched matmul and ∂R, ∂U one batched matmul over all steps; scores
//   [T,k,B,N] (unfolded: f_b + c_b or the logits); sums [T,B,k] (clamped Σf̃, relu2).
template <typename scalar_t>
void forward_loop(const Dims& m, const at::Tensor& gx, const at::Tensor& fx, const at::Tensor& W_rec,
                  const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_b, const at::Tensor& c_x,
                  const at::Tensor& b0, at::Tensor& outs, at::Tensor& pres, at::Tensor& cands, at::Tensor& fills,
                  at::Tensor& sums, at::Tensor& scores) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const bool folded = m.folded, relu2 = m.relu2;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  const scalar_t* cb = c_b.data_ptr<scalar_t>();
  const int64_t gT = gx.stride(0), gB = gx.stride(1), xT = fx.stride(0), xB = fx.stride(1), xk = fx.stride(2);
  const scalar_t* gxp = gx.data_ptr<scalar_t>();
  const scalar_t* fxp = fx.data_ptr<scalar_t>();
  scalar_t* fill0 = fills.data_ptr<scalar_t>();
  scalar_t* cand0 = cands.data_ptr<scalar_t>();
  const at::Tensor W_T = W_rec.t(), R_T = R_slices.transpose(1, 2);  // [d, rows], [k, N, s]
  at::Tensor b = b0;
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor P = pres.select(0, t);
    at::mm_out(P, b, W_T);  // [W_b b | Uᵀ V_b b per slice]  or  [W_b b | V_b b]
    scalar_t* Pp = P.data_ptr<scalar_t>();
    scalar_t* Sp = nullptr;
    if (!folded) {  // role scores of all slices in one batched matmul: z_j U_j, z = V_b b (or b when V_b = I)
      at::Tensor z = rows > d ? P.narrow(1, d, d) : b;
      at::Tensor S = scores.select(0, t);
      at::bmm_out(S, z.unflatten(1, {k, s}).transpose(0, 1), U_slices);
      Sp = S.data_ptr<scalar_t>();
    }
    scalar_t* sump = relu2 ? sums.select(0, t).data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, B, grain(d + 4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        scalar_t* __restrict__ p = Pp + i * rows;
        const scalar_t* __restrict__ g_in = gxp + t * gT + i * gB;
        for (int64_t e = 0; e < d; ++e) p[e] += g_in[e];  // gate pre-activation W_b b + W_x x (+ biases)
        for (int64_t j = 0; j < k; ++j) {
          scalar_t* __restrict__ sc = folded ? p + d + j * N : Sp + (j * B + i) * N;
          const scalar_t* __restrict__ xr = fxp + t * xT + i * xB + j * xk;
          const scalar_t* __restrict__ cbj = cb + j * N;
          if (relu2) {
            scalar_t* fr = fill0 + ((j * T + t) * B + i) * N;
            const scalar_t total = relu2_row(sc, cbj, xr, cx, fr, N);
            const scalar_t clamped = total < eps ? eps : total;  // NaN passes through
            sump[i * k + j] = clamped;
            for (int64_t n = 0; n < N; ++n) fr[n] = fr[n] / clamped;  // f = f̃ / max(Σf̃, eps)
          } else {
            for (int64_t n = 0; n < N; ++n) sc[n] = sc[n] + cbj[n] + xr[n] + cx;  // logits f_b + c_b + f_x + c_x
          }
        }
      }
    });
    P.narrow(1, 0, d).sigmoid_();  // g_t
    at::Tensor F = fills.select(1, t);  // [k, B, N]
    if (!relu2) {
      at::Tensor logits = folded ? P.narrow(1, d, kN).unflatten(1, {k, N}).transpose(0, 1) : scores.select(0, t);
      F.copy_(at::_softmax(logits, -1, false));
    }
    at::Tensor C = cands.select(1, t);  // [k, B, s]
    mm_into(k == 1 ? C.select(0, 0) : C, k == 1 ? F.select(0, 0) : F, k == 1 ? R_T.select(0, 0) : R_T);  // b̃ = R f
    if (m.tanh_candidate) C.tanh_();
    const scalar_t* bp = b.data_ptr<scalar_t>();
    scalar_t* op = outs.select(0, t).data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        for (int64_t j = 0; j < k; ++j)
          lerp_row(Pp + i * rows + j * s, bp + i * d + j * s, cand0 + ((j * T + t) * B + i) * s, op + i * d + j * s, s);
      }
    });
    b = outs.select(0, t);
  }
}

template <typename scalar_t>
void backward_loop(const Dims& m, const at::Tensor& grad, const at::Tensor& fx, const at::Tensor& W_rec,
                   const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_x, const at::Tensor& b0,
                   const at::Tensor& outs, const at::Tensor& pres, const at::Tensor& cands, const at::Tensor& fills,
                   const at::Tensor& sums, const at::Tensor& scores, at::Tensor& d_pre, at::Tensor& d_fb_all,
                   at::Tensor& d_fx, at::Tensor& d_cands, at::Tensor& d_f, at::Tensor& carry) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const bool folded = m.folded, relu2 = m.relu2, tanh_candidate = m.tanh_candidate;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  const int64_t xT = fx.stride(0), xB = fx.stride(1), xk = fx.stride(2);
  const int64_t dT = d_fx.stride(0), dB = d_fx.stride(1), dk = d_fx.stride(2);
  const scalar_t* fxp = fx.data_ptr<scalar_t>();
  scalar_t* dfx0 = d_fx.data_ptr<scalar_t>();
  const scalar_t* cand0 = cands.data_ptr<scalar_t>();
  const scalar_t* fill0 = fills.data_ptr<scalar_t>();
  scalar_t* dcand0 = d_cands.data_ptr<scalar_t>();
  scalar_t* dfb0 = folded ? nullptr : d_fb_all.data_ptr<scalar_t>();
  const scalar_t* dfp = d_f.data_ptr<scalar_t>();
  scalar_t* cr = carry.data_ptr<scalar_t>();
  const at::Tensor U_T = folded ? at::Tensor() : U_slices.transpose(1, 2);  // [k, N, s]
  for (int64_t t = T - 1; t >= 0; --t) {
    const scalar_t* go = grad.select(0, t).data_ptr<scalar_t>();
    const scalar_t* G = pres.select(0, t).data_ptr<scalar_t>();  // g_t in the first d columns
    const scalar_t* Pv = (t > 0 ? outs.select(0, t - 1) : b0).data_ptr<scalar_t>();
    scalar_t* dP = d_pre.select(0, t).data_ptr<scalar_t>();
    // ∂b_t = grad + carry; through the lerp to the gate pre-activation, the candidate and b_{t-1}.
    lerp_back_step<scalar_t>(go, cr, G, cand0, Pv, dP, dcand0, B, T, t, k, d, s, rows, tanh_candidate);
    // ∂f = Rᵀ ∂b̃, all slices in one batched matmul.
    mm_into(k == 1 ? d_f.select(0, 0) : d_f, k == 1 ? d_cands.select(1, t).select(0, 0) : d_cands.select(1, t),
            k == 1 ? R_slices.select(0, 0) : R_slices);
    // Through the normalisation to the role scores f_b (and f_x).
    const scalar_t* sump = relu2 ? sums.select(0, t).data_ptr<scalar_t>() : nullptr;
    const scalar_t* Sp = (!folded && relu2) ? scores.select(0, t).data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, B, grain(4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          const scalar_t* __restrict__ df = dfp + (j * B + i) * N;
          const scalar_t* __restrict__ f = fill0 + ((j * T + t) * B + i) * N;
          scalar_t* __restrict__ db = folded ? dP + i * rows + d + j * N : dfb0 + ((j * T + t) * B + i) * N;
          scalar_t* __restrict__ dx = dfx0 + t * dT + i * dB + j * dk;
          const scalar_t dot = dot_row(df, f, N);
          if (relu2) {
            // f = f̃/Σf̃: ∂a_n = 2a_n/Σ (∂f_n − Σ_m ∂f_m f_m); below the clamp Σ is the constant eps.
            const scalar_t S = sump[i * k + j];
            const scalar_t shift = S > eps ? dot : scalar_t(0);
            const scalar_t* sb = folded ? G + i * rows + d + j * N : Sp + (j * B + i) * N;
            relu2_back_row(df, sb, fxp + t * xT + i * xB + j * xk, cx, scalar_t(2) / S, shift, db, dx, N);
          } else {
            for (int64_t n = 0; n < N; ++n) {  // softmax: ∂s = f (∂f − Σ ∂f f), one score f_b + f_x
              const scalar_t ds = f[n] * (df[n] - dot);
              db[n] = ds;
              dx[n] = ds;
            }
          }
        }
      }
    });
    at::Tensor dPt = d_pre.select(0, t);
    if (!folded) {  // ∂z = U ∂f_b, all slices at once; z is V_b b (rows > d) or b itself
      at::Tensor dfb = d_fb_all.select(1, t);  // [k, B, N]
      if (rows > d) {
        mm_into(dPt.narrow(1, d, d).unflatten(1, {k, s}).transpose(0, 1), dfb, U_T);
      } else {
        carry.unflatten(1, {k, s}).transpose(0, 1).baddbmm_(dfb, U_T);
      }
    }
    carry.addmm_(dPt, W_rec);  // + (∂pre) W_rec
  }
}

std::vector<at::Tensor> tpru_forward(const at::Tensor& gx_in, const at::Tensor& fx_in, const at::Tensor& W_rec,
                                     const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_b_in,
                                     const at::Tensor& c_x, const at::Tensor& b0_in, bool relu2, bool tanh_candidate) {
  Dims m;
  m.T = gx_in.size(0); m.B = gx_in.size(1); m.d = gx_in.size(2);
  m.k = fx_in.size(2); m.N = fx_in.size(3); m.s = m.d / m.k; m.rows = W_rec.size(0);
  m.folded = U_slices.numel() == 0; m.relu2 = relu2; m.tanh_candidate = tanh_candidate;
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows;
  TORCH_CHECK(m.folded ? rows == d + k * N : (rows == d || rows == 2 * d), "tpru_forward: W_rec has ", rows, " rows");
  auto gx = unit_inner(gx_in), fx = unit_inner(fx_in), b0 = b0_in.contiguous(), c_b = c_b_in.contiguous();
  auto opts = gx.options();
  auto outs = at::empty({T, B, d}, opts);
  auto pres = at::empty({T, B, rows}, opts);
  auto cands = at::empty({k, T, B, s}, opts);
  auto fills = at::empty({k, T, B, N}, opts);
  auto sums = relu2 ? at::empty({T, B, k}, opts) : at::empty({0}, opts);
  auto scores = m.folded ? at::empty({0}, opts) : at::empty({T, k, B, N}, opts);
  AT_DISPATCH_FLOATING_TYPES(gx.scalar_type(), "tpru_forward", [&] {
    forward_loop<scalar_t>(m, gx, fx, W_rec, R_slices, U_slices, c_b, c_x, b0, outs, pres, cands, fills, sums, scores);
  });
  return {outs, pres, cands, fills, sums, scores};
}

// Returns {d_gx, d_fx, d_W_rec, d_R, d_U (empty when folded), d_c_b [k,N], d_c_x [], d_b0}.
std::vector<at::Tensor> tpru_backward(const at::Tensor& grad_in, const at::Tensor& fx_in, const at::Tensor& W_rec,
                                      const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_x,
                                      const at::Tensor& b0, const at::Tensor& outs, const at::Tensor& pres,
                                      const at::Tensor& cands, const at::Tensor& fills, const at::Tensor& sums,
                                      const at::Tensor& scores, bool relu2, bool tanh_candidate) {
  Dims m;
  m.T = outs.size(0); m.B = outs.size(1); m.d = outs.size(2);
  m.k = fills.size(0); m.N = fills.size(3); m.s = m.d / m.k; m.rows = W_rec.size(0);
  m.folded = U_slices.numel() == 0; m.relu2 = relu2; m.tanh_candidate = tanh_candidate;
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N, TB = T * B;
  auto grad = grad_in.contiguous(), fx = unit_inner(fx_in);
  auto opts = outs.options();
  auto d_pre = at::empty({T, B, rows}, opts);
  auto d_fb_all = m.folded ? at::Tensor() : at::empty({k, T, B, N}, opts);
  auto d_fx = at::empty_like(fx);  // fx's own layout, which its producer (an einsum) prefers
  auto d_cands = at::empty({k, T, B, s}, opts);
  auto d_f = at::empty({k, B, N}, opts);
  auto carry = at::zeros({B, d}, opts);
  AT_DISPATCH_FLOATING_TYPES(outs.scalar_type(), "tpru_backward", [&] {
    backward_loop<scalar_t>(m, grad, fx, W_rec, R_slices, U_slices, c_x, b0, outs, pres, cands, fills, sums, scores,
                            d_pre, d_fb_all, d_fx, d_cands, d_f, carry);
  });
  // Weight gradients after the loop, one large matmul each: ∂W_rec = Σ_t ∂pre_tᵀ b_{t-1}, ...
  at::Tensor d_W_rec = at::mm(d_pre.select(0, 0).t(), b0);
  if (T > 1) d_W_rec.addmm_(d_pre.narrow(0, 1, T - 1).reshape({-1, rows}).t(), outs.narrow(0, 0, T - 1).reshape({-1, d}));
  // ∂R = Σ_t ∂b̃_tᵀ f_t per slice
  at::Tensor d_R = at::bmm(d_cands.view({k, TB, s}).transpose(1, 2), fills.view({k, TB, N}));
  at::Tensor d_U = at::empty({0}, opts);
  if (!m.folded) {  // ∂U = Σ_t z_tᵀ ∂f_b,t per slice
    at::Tensor dfb = d_fb_all.view({k, TB, N});
    if (rows > d) {
      d_U = at::bmm(pres.view({TB, rows}).narrow(1, d, d).unflatten(1, {k, s}).permute({1, 2, 0}), dfb);
    } else {  // z_t = b_{t-1}
      d_U = at::bmm(b0.unflatten(1, {k, s}).permute({1, 2, 0}), dfb.narrow(1, 0, B));
      if (T > 1)
        d_U.baddbmm_(outs.narrow(0, 0, T - 1).reshape({-1, d}).unflatten(1, {k, s}).permute({1, 2, 0}),
                     dfb.narrow(1, B, TB - B));
    }
  }
  at::Tensor d_c_b;
  if (!relu2) d_c_b = d_fx.sum(at::IntArrayRef{0, 1});  // a braced list alone is ambiguous in torch 2.11 (IntArrayRef or DimnameList)
  else if (m.folded) d_c_b = d_pre.view({TB, rows}).narrow(1, d, kN).sum(0).view({k, N});
  else d_c_b = d_fb_all.view({k, TB, N}).sum(1);
  at::Tensor d_c_x = d_fx.sum().reshape({});
  at::Tensor d_gx = d_pre.narrow(2, 0, d);
  return {d_gx, d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, carry};
}

// ---------------------------------------------------------------------------------------------
// Slices, fused (unfolded path with ReLU²: `tpru[slices=k]` where kN > d + N). No k·N-sized tensor
// (role scores, fillers, their gradients) is ever written to memory outside two [k, 2B, N] scratch
// buffers that are reused from step to step (cache-resident) and from call to call (no fresh pages
// to fault in). The input takes the same road: the op gets zx = V_x x (+ b_Vx) [T, B, d], not the
// input scores f_x = Uᵀ zx [T, B, k, N] (which the unfused path gets from one large einsum, written
// to memory and read back, and again for its gradient). Per step:
//   Z = [z_t; zx_t] per slice [k, 2B, s] (z_t = V_b b_{t-1}, or b_{t-1} when V_b = I)
//   S = Z U                 one batched matmul: f_b and f_x of the step        [k, 2B, N]
//   one pass over the rows: f = (ReLU(f_b + c_b) + ReLU(f_x + c_x))² / Σ, in place
//   b̃ = R f                 one batched matmul
// Backward keeps only z_t (in `pres`) and zx, recomputes S, and accumulates ∂R, ∂U (batched
// matmuls with inner size B, 2B) inside the loop; ∂zx comes back as [T, B, d].

// Scratch tensors kept between calls (per thread: autograd may run backward on another thread).
// A slot keeps the largest buffer asked of it (per dtype); a call gets a contiguous view of its size.
at::Tensor scratch(int slot, at::IntArrayRef sizes, const at::TensorOptions& opts) {
  thread_local std::vector<at::Tensor> pool(16);
  const int64_t need = c10::multiply_integers(sizes);
  at::Tensor& t = pool[2 * slot + (opts.dtype().toScalarType() == at::kDouble ? 1 : 0)];
  if (!t.defined() || t.scalar_type() != opts.dtype().toScalarType() || t.numel() < need) {
    t = at::empty({need}, opts);
  }
  return t.narrow(0, 0, need).view(sizes);
}

// Z[:, :B] = z per slice, Z[:, B:] = zx per slice ([B, d] row-major views with unit inner stride).
template <typename scalar_t>
void stack_inputs(scalar_t* __restrict__ Zp, const scalar_t* z, int64_t zB, const scalar_t* zx, int64_t xB, int64_t B,
                  int64_t k, int64_t s) {
  at::parallel_for(0, B, grain(2 * k * s), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j < k; ++j) {
        std::copy_n(z + i * zB + j * s, s, Zp + (j * 2 * B + i) * s);
        std::copy_n(zx + i * xB + j * s, s, Zp + (j * 2 * B + B + i) * s);
      }
  });
}

template <typename scalar_t>
inline scalar_t relu2_sum_row(scalar_t* __restrict__ sc, const scalar_t* __restrict__ cb,
                              const scalar_t* __restrict__ xs, scalar_t cx, int64_t N) {
  // sc ← f̃ = (ReLU(f_b + c_b) + ReLU(f_x + c_x))², in place; returns Σf̃
  for (int64_t n = 0; n < N; ++n) {
    const scalar_t a = relu(sc[n] + cb[n]) + relu(xs[n] + cx);
    sc[n] = a * a;
  }
  scalar_t total = 0;
#pragma omp simd reduction(+ : total)
  for (int64_t n = 0; n < N; ++n) total += sc[n];
  return total;
}

template <typename scalar_t>
void slices_forward_loop(const Dims& m, const at::Tensor& gx, const at::Tensor& zx, const at::Tensor& W_rec,
                         const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_b,
                         const at::Tensor& c_x, const at::Tensor& b0, at::Tensor& outs, at::Tensor& pres,
                         at::Tensor& cands, at::Tensor& sums, at::Tensor& Z, at::Tensor& S) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  const scalar_t* cb = c_b.data_ptr<scalar_t>();
  const int64_t gT = gx.stride(0), gB = gx.stride(1), zT = zx.stride(0), zB = zx.stride(1);
  const scalar_t* gxp = gx.data_ptr<scalar_t>();
  const scalar_t* zxp = zx.data_ptr<scalar_t>();
  scalar_t* cand0 = cands.data_ptr<scalar_t>();
  scalar_t* Zp = Z.data_ptr<scalar_t>();
  scalar_t* Sp = S.data_ptr<scalar_t>();
  const at::Tensor W_T = W_rec.t(), R_T = R_slices.transpose(1, 2);  // [d, rows], [k, N, s]
  const at::Tensor Sf = S.narrow(1, 0, B);                               // the fillers' half [k, B, N]
  at::Tensor b = b0;
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor P = pres.select(0, t);
    at::mm_out(P, b, W_T);  // [W_b b | V_b b]  or  W_b b
    scalar_t* Pp = P.data_ptr<scalar_t>();
    if (rows > d) stack_inputs(Zp, Pp + d, rows, zxp + t * zT, zB, B, k, s);
    else stack_inputs(Zp, b.data_ptr<scalar_t>(), d, zxp + t * zT, zB, B, k, s);
    at::bmm_out(S, Z, U_slices);  // f_b and f_x of every slice [k, 2B, N]
    scalar_t* sump = sums.select(0, t).data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(d + 4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        scalar_t* __restrict__ p = Pp + i * rows;
        const scalar_t* __restrict__ g_in = gxp + t * gT + i * gB;
        for (int64_t e = 0; e < d; ++e) p[e] += g_in[e];  // gate pre-activation
        for (int64_t j = 0; j < k; ++j) {
          scalar_t* sc = Sp + (j * 2 * B + i) * N;
          const scalar_t total = relu2_sum_row(sc, cb + j * N, Sp + (j * 2 * B + B + i) * N, cx, N);
          const scalar_t clamped = total < eps ? eps : total;  // NaN passes through
          sump[i * k + j] = clamped;
          for (int64_t n = 0; n < N; ++n) sc[n] = sc[n] / clamped;  // f = f̃ / max(Σf̃, eps), in place
        }
      }
    });
    P.narrow(1, 0, d).sigmoid_();  // g_t
    at::Tensor C = cands.select(1, t);  // [k, B, s]
    at::bmm_out(C, Sf, R_T);  // b̃ = R f
    if (m.tanh_candidate) C.tanh_();
    const scalar_t* bp = b.data_ptr<scalar_t>();
    scalar_t* op = outs.select(0, t).data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < k; ++j)
          lerp_row(Pp + i * rows + j * s, bp + i * d + j * s, cand0 + ((j * T + t) * B + i) * s, op + i * d + j * s, s);
    });
    b = outs.select(0, t);
  }
}

// Backward of one row of one slice, from the recomputed raw scores sc (f_b without c_b), xs (f_x
// without c_x) and ∂f (df): on return sc holds f, df holds ∂f_b and xs holds ∂f_x.
template <typename scalar_t>
inline void relu2_fused_back_row(scalar_t* __restrict__ sc, scalar_t* __restrict__ df, scalar_t* __restrict__ xs,
                                 const scalar_t* __restrict__ cb, scalar_t cx, scalar_t S, scalar_t eps, int64_t N) {
  scalar_t dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t n = 0; n < N; ++n) {
    const scalar_t a = relu(sc[n] + cb[n]) + relu(xs[n] + cx);
    dot += df[n] * ((a * a) / S);
  }
  const scalar_t shift = S > eps ? dot : scalar_t(0);  // below the clamp Σ is the constant eps
  const scalar_t coef = scalar_t(2) / S;
  for (int64_t n = 0; n < N; ++n) {
    const scalar_t v = sc[n] + cb[n];
    const scalar_t xv = xs[n] + cx;
    const scalar_t a = relu(v) + relu(xv);
    const scalar_t da = a * coef * (df[n] - shift);  // 2a/Σ · (∂f − shift)
    sc[n] = (a * a) / S;
    df[n] = v > 0 ? da : scalar_t(0);
    xs[n] = xv > 0 ? da : scalar_t(0);
  }
}

template <typename scalar_t>
void slices_backward_loop(const Dims& m, const at::Tensor& grad, const at::Tensor& zx, const at::Tensor& W_rec,
                          const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_b,
                          const at::Tensor& c_x, const at::Tensor& b0, const at::Tensor& outs, const at::Tensor& pres,
                          const at::Tensor& cands, const at::Tensor& sums, at::Tensor& d_pre, at::Tensor& d_zx,
                          at::Tensor& d_cands, at::Tensor& carry, at::Tensor& d_R, at::Tensor& d_U,
                          at::Tensor& d_c_b, at::Tensor& d_c_x, at::Tensor& Z, at::Tensor& S, at::Tensor& DF) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const bool tanh_candidate = m.tanh_candidate;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  const scalar_t* cb = c_b.data_ptr<scalar_t>();
  const int64_t zT = zx.stride(0), zB = zx.stride(1);
  const scalar_t* zxp = zx.data_ptr<scalar_t>();
  const scalar_t* cand0 = cands.data_ptr<scalar_t>();
  scalar_t* dcand0 = d_cands.data_ptr<scalar_t>();
  scalar_t* Zp = Z.data_ptr<scalar_t>();
  scalar_t* Sp = S.data_ptr<scalar_t>();
  scalar_t* DFp = DF.data_ptr<scalar_t>();
  scalar_t* cr = carry.data_ptr<scalar_t>();
  const at::Tensor U_T = U_slices.transpose(1, 2);  // [k, N, s]
  const at::Tensor Sf = S.narrow(1, 0, B), DFb = DF.narrow(1, 0, B), DFx = DF.narrow(1, B, B);
  const at::Tensor ZT = Z.transpose(1, 2);  // [k, s, 2B]
  for (int64_t t = T - 1; t >= 0; --t) {
    const scalar_t* go = grad.select(0, t).data_ptr<scalar_t>();
    const at::Tensor Pt = pres.select(0, t);
    const scalar_t* G = Pt.data_ptr<scalar_t>();  // g_t in the first d columns
    const at::Tensor prev = t > 0 ? outs.select(0, t - 1) : b0;
    const scalar_t* Pv = prev.data_ptr<scalar_t>();
    scalar_t* dP = d_pre.select(0, t).data_ptr<scalar_t>();
    lerp_back_step<scalar_t>(go, cr, G, cand0, Pv, dP, dcand0, B, T, t, k, d, s, rows, tanh_candidate);
    if (rows > d) stack_inputs(Zp, G + d, rows, zxp + t * zT, zB, B, k, s);
    else stack_inputs(Zp, Pv, d, zxp + t * zT, zB, B, k, s);
    const at::Tensor dcand = d_cands.select(1, t);  // [k, B, s]
    at::bmm_out(S, Z, U_slices);  // the step's raw scores f_b, f_x again
    at::Tensor dfb_out = DFb;
    at::bmm_out(dfb_out, dcand, R_slices);  // ∂f = Rᵀ ∂b̃ [k, B, N]
    const scalar_t* sump = sums.select(0, t).data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = (j * 2 * B + i) * N, rx = (j * 2 * B + B + i) * N;
          scalar_t* dx = DFp + rx;
          std::copy_n(Sp + rx, N, dx);  // f_x's raw score, overwritten by ∂f_x
          relu2_fused_back_row(Sp + r, DFp + r, dx, cb + j * N, cx, sump[i * k + j], eps, N);
        }
    });
    d_R.baddbmm_(dcand.transpose(1, 2), Sf);  // ∂R += ∂b̃ᵀ f per slice
    d_U.baddbmm_(ZT, DF);                     // ∂U += zᵀ ∂f_b + zxᵀ ∂f_x per slice
    d_c_b.add_(DFb.sum(1));
    d_c_x.add_(DFx.sum());
    at::Tensor dzx = d_zx.select(0, t).unflatten(1, {k, s}).transpose(0, 1);
    at::bmm_out(dzx, DFx, U_T);  // ∂zx = U ∂f_x
    at::Tensor dPt = d_pre.select(0, t);
    if (rows > d) {  // ∂z = U ∂f_b into the V_b rows of ∂pre
      at::Tensor dz = dPt.narrow(1, d, d).unflatten(1, {k, s}).transpose(0, 1);
      at::bmm_out(dz, DFb, U_T);
    } else {  // z = b_{t-1}
      carry.unflatten(1, {k, s}).transpose(0, 1).baddbmm_(DFb, U_T);
    }
    carry.addmm_(dPt, W_rec);
  }
}

// The slices loops' sizes, read the same way by forward and backward: `steps` is any [T, B, d] tensor of
// the sequence (gx going forward, outs going back), U_slices is [k, s, N], W_rec has d or 2d rows.
Dims slices_dims(const at::Tensor& steps, const at::Tensor& W_rec, const at::Tensor& U_slices, bool tanh_candidate) {
  Dims m;
  m.T = steps.size(0); m.B = steps.size(1); m.d = steps.size(2);
  m.k = U_slices.size(0); m.N = U_slices.size(2); m.s = U_slices.size(1); m.rows = W_rec.size(0);
  m.folded = false; m.relu2 = true; m.tanh_candidate = tanh_candidate;
  return m;
}

std::vector<at::Tensor> tpru_slices_forward(const at::Tensor& gx_in, const at::Tensor& zx_in, const at::Tensor& W_rec,
                                            const at::Tensor& R_slices, const at::Tensor& U_slices,
                                            const at::Tensor& c_b_in, const at::Tensor& c_x, const at::Tensor& b0_in,
                                            bool tanh_candidate) {
  const Dims m = slices_dims(gx_in, W_rec, U_slices, tanh_candidate);
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows;
  TORCH_CHECK(rows == d || rows == 2 * d, "tpru_slices_forward: W_rec has ", rows, " rows");
  TORCH_CHECK(k * s == d && zx_in.size(2) == d, "tpru_slices_forward: U_slices / zx do not match d");
  auto gx = unit_inner(gx_in), zx = unit_inner(zx_in), b0 = b0_in.contiguous(), c_b = c_b_in.contiguous();
  auto U = U_slices.contiguous();
  auto opts = gx.options();
  auto outs = at::empty({T, B, d}, opts);
  auto pres = at::empty({T, B, rows}, opts);
  auto cands = at::empty({k, T, B, s}, opts);
  auto sums = at::empty({T, B, k}, opts);
  at::Tensor Z = scratch(0, {k, 2 * B, s}, opts);
  at::Tensor S = scratch(1, {k, 2 * B, N}, opts);
  AT_DISPATCH_FLOATING_TYPES(gx.scalar_type(), "tpru_slices_forward", [&] {
    slices_forward_loop<scalar_t>(m, gx, zx, W_rec, R_slices, U, c_b, c_x, b0, outs, pres, cands, sums, Z, S);
  });
  return {outs, pres, cands, sums};
}

// Returns {d_gx, d_zx, d_W_rec, d_R, d_U, d_c_b [k,N], d_c_x [], d_b0}.
std::vector<at::Tensor> tpru_slices_backward(const at::Tensor& grad_in, const at::Tensor& zx_in,
                                             const at::Tensor& W_rec, const at::Tensor& R_slices,
                                             const at::Tensor& U_slices, const at::Tensor& c_b_in,
                                             const at::Tensor& c_x, const at::Tensor& b0, const at::Tensor& outs,
                                             const at::Tensor& pres, const at::Tensor& cands, const at::Tensor& sums,
                                             bool tanh_candidate) {
  const Dims m = slices_dims(outs, W_rec, U_slices, tanh_candidate);
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows;
  auto grad = grad_in.contiguous(), zx = unit_inner(zx_in), c_b = c_b_in.contiguous();
  auto U = U_slices.contiguous();
  auto opts = outs.options();
  auto d_pre = at::empty({T, B, rows}, opts);
  auto d_zx = at::empty({T, B, d}, opts);
  auto d_cands = at::empty({k, T, B, s}, opts);
  auto carry = at::zeros({B, d}, opts);
  auto d_R = at::zeros({k, s, N}, opts);
  auto d_U = at::zeros({k, s, N}, opts);
  auto d_c_b = at::zeros({k, N}, opts);
  auto d_c_x = at::zeros({}, opts);
  at::Tensor Z = scratch(2, {k, 2 * B, s}, opts);
  at::Tensor S = scratch(3, {k, 2 * B, N}, opts);
  at::Tensor DF = scratch(4, {k, 2 * B, N}, opts);
  AT_DISPATCH_FLOATING_TYPES(outs.scalar_type(), "tpru_slices_backward", [&] {
    slices_backward_loop<scalar_t>(m, grad, zx, W_rec, R_slices, U, c_b, c_x, b0, outs, pres, cands, sums,
                                   d_pre, d_zx, d_cands, carry, d_R, d_U, d_c_b, d_c_x, Z, S, DF);
  });
  at::Tensor d_W_rec = at::mm(d_pre.select(0, 0).t(), b0);
  if (T > 1) d_W_rec.addmm_(d_pre.narrow(0, 1, T - 1).reshape({-1, rows}).t(), outs.narrow(0, 0, T - 1).reshape({-1, d}));
  at::Tensor d_gx = d_pre.narrow(2, 0, d);
  return {d_gx, d_zx, d_W_rec, d_R, d_U, d_c_b, d_c_x, carry};
}

}  // namespace

TORCH_LIBRARY(tprbench, m) {
  m.def("tpru_forward(Tensor gx, Tensor fx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_b, Tensor c_x, "
        "Tensor b0, bool relu2, bool tanh_candidate) -> Tensor[]");
  m.def("tpru_backward(Tensor grad, Tensor fx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_x, Tensor b0, "
        "Tensor outs, Tensor pres, Tensor cands, Tensor fills, Tensor sums, Tensor scores, bool relu2, "
        "bool tanh_candidate) -> Tensor[]");
  m.def("tpru_slices_forward(Tensor gx, Tensor zx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_b, "
        "Tensor c_x, Tensor b0, bool tanh_candidate) -> Tensor[]");
  m.def("tpru_slices_backward(Tensor grad, Tensor zx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_b, "
        "Tensor c_x, Tensor b0, Tensor outs, Tensor pres, Tensor cands, Tensor sums, bool tanh_candidate) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tprbench, CPU, m) {
  m.impl("tpru_forward", &tpru_forward);
  m.impl("tpru_backward", &tpru_backward);
  m.impl("tpru_slices_forward", &tpru_slices_forward);
  m.impl("tpru_slices_backward", &tpru_slices_backward);
}
