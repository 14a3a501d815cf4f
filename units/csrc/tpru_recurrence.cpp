// The TPRU time loop (forward and backward) in C++: the same computation as the Python loop in
// units/tpru_fused.py, without the Python interpreter between the ops of a step.
//
// Why: at d = 64 a step is ~10 small ops; from Python each costs a few microseconds of
// interpreter and dispatcher time, which is most of the step. Here a step is one matmul for
// b_{t-1} (plus k for the unfolded slice path), k for the binding, and two hand-written loops over
// the batch that do all the elementwise work of the step in one pass each (gate input, ReLU²
// normalisation over roles, the lerp); sigmoid/tanh/softmax stay ATen calls (vectorised there).
// The backward walks time once, fused the same way, and forms every weight gradient after the
// loop as one large matmul. Built and loaded by units/tpru_ext.py (torch.utils.cpp_extension, once
// per machine); registered as torch.ops.tprbench.tpru_forward / tpru_backward.
//
// Layout (time-major, as units/tpru_fused.py): gx [T,B,d], fx [T,B,k,N], W_rec [rows,d],
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

// out = a @ b into a view (at::mm_out wants an lvalue; strided rows are written in place).
inline void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::mm_out(out, a, b); }

template <typename T>
inline T relu(T v) { return v < T(0) ? T(0) : v; }  // NaN stays NaN, as torch.relu

struct Dims {
  int64_t T, B, d, k, N, s, rows;
  bool folded, relu2, tanh_candidate;
};

Dims dims_of(const at::Tensor& gx, const at::Tensor& fx, const at::Tensor& W_rec, bool folded, bool relu2, bool tanh_c) {
  Dims m;
  m.T = gx.size(0); m.B = gx.size(1); m.d = gx.size(2);
  m.k = fx.size(2); m.N = fx.size(3); m.s = m.d / m.k; m.rows = W_rec.size(0);
  m.folded = folded; m.relu2 = relu2; m.tanh_candidate = tanh_c;
  return m;
}

template <typename scalar_t>
void forward_loop(const Dims& m, const at::Tensor& gx, const at::Tensor& fx, const at::Tensor& W_T,
                  const std::vector<at::Tensor>& R_T, const std::vector<at::Tensor>& U_j, const at::Tensor& c_b,
                  const at::Tensor& c_x, const at::Tensor& b0, at::Tensor& outs, at::Tensor& pres, at::Tensor& cands,
                  at::Tensor& fills, at::Tensor& sums, at::Tensor& scores) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const bool folded = m.folded, relu2 = m.relu2, tanh_candidate = m.tanh_candidate;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  const scalar_t* cb = c_b.data_ptr<scalar_t>();
  at::Tensor b = b0;
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor P = pres.select(0, t);
    at::mm_out(P, b, W_T);  // [W_b b | Uᵀ V_b b per slice]  or  [W_b b | V_b b]
    if (!folded) {          // role scores slice by slice: z_j U_j, z = V_b b (or b when V_b = I)
      at::Tensor z = rows > d ? P.narrow(1, d, d) : b;
      at::Tensor S = scores.select(0, t);
      for (int64_t j = 0; j < k; ++j) mm_into(S.select(1, j), z.narrow(1, j * s, s), U_j[j]);
    }
    scalar_t* Pp = P.data_ptr<scalar_t>();
    scalar_t* Sp = folded ? Pp + d : scores.select(0, t).data_ptr<scalar_t>();
    const int64_t s_row = folded ? rows : kN;
    const scalar_t* gxp = gx.select(0, t).data_ptr<scalar_t>();
    const scalar_t* fxp = fx.select(0, t).data_ptr<scalar_t>();
    scalar_t* fp = fills.select(0, t).data_ptr<scalar_t>();
    scalar_t* sump = relu2 ? sums.select(0, t).data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, B, grain(d + 4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        scalar_t* __restrict__ p = Pp + i * rows;
        const scalar_t* __restrict__ g_in = gxp + i * d;
        for (int64_t e = 0; e < d; ++e) p[e] += g_in[e];  // gate pre-activation W_b b + W_x x (+ biases)
        scalar_t* __restrict__ sc = Sp + i * s_row;
        const scalar_t* __restrict__ xr = fxp + i * kN;
        scalar_t* __restrict__ fr = fp + i * kN;
        if (relu2) {
          for (int64_t j = 0; j < k; ++j) {
            scalar_t total = 0;
            const int64_t o = j * N;
#pragma omp simd reduction(+ : total)
            for (int64_t n = 0; n < N; ++n) {
              const scalar_t v = sc[o + n] + cb[o + n];  // f_b + c_b (kept for backward)
              sc[o + n] = v;
              const scalar_t a = relu(v) + relu(xr[o + n] + cx);
              const scalar_t a2 = a * a;  // f̃
              fr[o + n] = a2;
              total += a2;
            }
            const scalar_t clamped = total < eps ? eps : total;  // NaN passes through
            sump[i * k + j] = clamped;
            for (int64_t n = 0; n < N; ++n) fr[o + n] = fr[o + n] / clamped;  // f = f̃ / max(Σf̃, eps)
          }
        } else {
          for (int64_t q = 0; q < kN; ++q) sc[q] = sc[q] + cb[q] + xr[q] + cx;  // softmax logits f_b + c_b + f_x + c_x
        }
      }
    });
    P.narrow(1, 0, d).sigmoid_();  // g_t
    at::Tensor F = fills.select(0, t);
    if (!relu2) {
      at::Tensor logits = folded ? P.narrow(1, d, kN).view({B, k, N}) : scores.select(0, t);
      at::_softmax_out(F, logits, -1, false);
    }
    at::Tensor C = cands.select(0, t);
    for (int64_t j = 0; j < k; ++j) mm_into(C.narrow(1, j * s, s), F.select(1, j), R_T[j]);  // b̃ = R f
    if (tanh_candidate) C.tanh_();
    at::Tensor O = outs.select(0, t);
    const scalar_t* bp = b.data_ptr<scalar_t>();
    const scalar_t* cp = C.data_ptr<scalar_t>();
    scalar_t* op = O.data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const scalar_t* __restrict__ g = Pp + i * rows;
        const scalar_t* __restrict__ bb = bp + i * d;
        const scalar_t* __restrict__ cc = cp + i * d;
        scalar_t* __restrict__ oo = op + i * d;
        for (int64_t e = 0; e < d; ++e) oo[e] = bb[e] + g[e] * (cc[e] - bb[e]);  // b_t = g b̃ + (1 − g) b_{t-1}
      }
    });
    b = O;
  }
}

template <typename scalar_t>
void backward_loop(const Dims& m, const at::Tensor& grad, const at::Tensor& fx, const at::Tensor& W_rec,
                   const std::vector<at::Tensor>& R_j, const std::vector<at::Tensor>& U_T, const at::Tensor& c_x,
                   const at::Tensor& b0, const at::Tensor& outs, const at::Tensor& pres, const at::Tensor& cands,
                   const at::Tensor& fills, const at::Tensor& sums, const at::Tensor& scores, at::Tensor& d_pre,
                   at::Tensor& d_fb_all, at::Tensor& d_fx, at::Tensor& d_cand_all, at::Tensor& d_f, at::Tensor& carry) {
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  const bool folded = m.folded, relu2 = m.relu2, tanh_candidate = m.tanh_candidate;
  const scalar_t cx = c_x.item<scalar_t>();
  const scalar_t eps = static_cast<scalar_t>(kNormEps);
  scalar_t* cr = carry.data_ptr<scalar_t>();
  for (int64_t t = T - 1; t >= 0; --t) {
    const scalar_t* go = grad.select(0, t).data_ptr<scalar_t>();
    const scalar_t* G = pres.select(0, t).data_ptr<scalar_t>();  // g_t in the first d columns
    const scalar_t* C = cands.select(0, t).data_ptr<scalar_t>();
    const scalar_t* Pv = (t > 0 ? outs.select(0, t - 1) : b0).data_ptr<scalar_t>();
    scalar_t* dP = d_pre.select(0, t).data_ptr<scalar_t>();
    scalar_t* dC = d_cand_all.select(0, t).data_ptr<scalar_t>();
    // ∂b_t = grad + carry; through the lerp to the gate pre-activation, the candidate and b_{t-1}.
    at::parallel_for(0, B, grain(d), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t r = i * d;
        const scalar_t* __restrict__ g = G + i * rows;
        scalar_t* __restrict__ dp = dP + i * rows;
        for (int64_t e = 0; e < d; ++e) {
          const scalar_t dh = go[r + e] + cr[r + e];
          const scalar_t ge = g[e], c = C[r + e];
          dp[e] = dh * (c - Pv[r + e]) * ge * (1 - ge);
          scalar_t dc = dh * ge;
          if (tanh_candidate) dc = dc * (1 - c * c);
          dC[r + e] = dc;
          cr[r + e] = dh * (1 - ge);
        }
      }
    });
    // ∂f = Rᵀ ∂b̃ per slice.
    at::Tensor dCt = d_cand_all.select(0, t);
    for (int64_t j = 0; j < k; ++j) mm_into(d_f.select(1, j), dCt.narrow(1, j * s, s), R_j[j]);
    // Through the normalisation to the role scores f_b (and f_x).
    const scalar_t* dfp = d_f.data_ptr<scalar_t>();
    const scalar_t* fp = fills.select(0, t).data_ptr<scalar_t>();
    const scalar_t* fxp = fx.select(0, t).data_ptr<scalar_t>();
    const scalar_t* sump = relu2 ? sums.select(0, t).data_ptr<scalar_t>() : nullptr;
    const scalar_t* SB = folded ? G + d : (relu2 ? scores.select(0, t).data_ptr<scalar_t>() : nullptr);
    const int64_t sb_row = folded ? rows : kN;
    scalar_t* dfb = folded ? dP + d : d_fb_all.select(0, t).data_ptr<scalar_t>();
    scalar_t* dfx = d_fx.select(0, t).data_ptr<scalar_t>();
    at::parallel_for(0, B, grain(4 * kN), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          const int64_t o = i * kN + j * N;
          const scalar_t* __restrict__ df = dfp + o;
          const scalar_t* __restrict__ f = fp + o;
          scalar_t* __restrict__ db = dfb + i * sb_row + j * N;
          scalar_t* __restrict__ dx = dfx + o;
          scalar_t dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t n = 0; n < N; ++n) dot += df[n] * f[n];
          if (relu2) {
            // f = f̃/Σf̃: ∂a_n = 2a_n/Σ (∂f_n − Σ_m ∂f_m f_m); below the clamp Σ is the constant eps.
            const scalar_t S = sump[i * k + j];
            const scalar_t shift = S > eps ? dot : scalar_t(0);
            const scalar_t* __restrict__ sb = SB + i * sb_row + j * N;
            const scalar_t* __restrict__ xr = fxp + o;
            for (int64_t n = 0; n < N; ++n) {
              const scalar_t xv = xr[n] + cx;
              const scalar_t a = relu(sb[n]) + relu(xv);
              const scalar_t da = 2 * a / S * (df[n] - shift);
              db[n] = sb[n] > 0 ? da : scalar_t(0);
              dx[n] = xv > 0 ? da : scalar_t(0);
            }
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
    if (!folded) {  // ∂z = U ∂f_b per slice; z is V_b b (rows > d) or b itself
      at::Tensor dfbt = d_fb_all.select(0, t);
      for (int64_t j = 0; j < k; ++j) {
        if (rows > d) {
          mm_into(dPt.narrow(1, d + j * s, s), dfbt.select(1, j), U_T[j]);
        } else {
          carry.narrow(1, j * s, s).addmm_(dfbt.select(1, j), U_T[j]);
        }
      }
    }
    carry.addmm_(dPt, W_rec);  // + (∂pre) W_rec
  }
}

// Returns {outs [T,B,d], pres [T,B,rows] (gate g_t in the first d columns; with folding the role
// scores f_b + c_b, or the softmax logits, in the rest; unfolded: z_t = V_b b_{t-1}), cands [T,B,d]
// (after tanh when asked), fills [T,B,k,N], sums [T,B,k] (clamped Σf̃; relu2 only), scores
// [T,B,k,N] (unfolded only: f_b + c_b, or the logits)}. Empty tensors where a path has none.
std::vector<at::Tensor> tpru_forward(const at::Tensor& gx_in, const at::Tensor& fx_in, const at::Tensor& W_rec,
                                     const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_b_in,
                                     const at::Tensor& c_x, const at::Tensor& b0_in, bool relu2, bool tanh_candidate) {
  const bool folded = U_slices.numel() == 0;
  const Dims m = dims_of(gx_in, fx_in, W_rec, folded, relu2, tanh_candidate);
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  TORCH_CHECK(folded ? rows == d + kN : (rows == d || rows == 2 * d), "tpru_forward: W_rec has ", rows, " rows");
  auto gx = gx_in.contiguous(), fx = fx_in.contiguous(), b0 = b0_in.contiguous();
  auto c_b = c_b_in.contiguous();
  auto opts = gx.options();
  auto outs = at::empty({T, B, d}, opts);
  auto pres = at::empty({T, B, rows}, opts);
  auto cands = at::empty({T, B, d}, opts);
  auto fills = at::empty({T, B, k, N}, opts);
  auto sums = relu2 ? at::empty({T, B, k}, opts) : at::empty({0}, opts);
  auto scores = folded ? at::empty({0}, opts) : at::empty({T, B, k, N}, opts);
  auto W_T = W_rec.t();
  std::vector<at::Tensor> R_T, U_j;
  for (int64_t j = 0; j < k; ++j) {
    R_T.push_back(R_slices.select(0, j).t());  // [N, s]
    if (!folded) U_j.push_back(U_slices.select(0, j));  // [s, N]
  }
  AT_DISPATCH_FLOATING_TYPES(gx.scalar_type(), "tpru_forward", [&] {
    forward_loop<scalar_t>(m, gx, fx, W_T, R_T, U_j, c_b, c_x, b0, outs, pres, cands, fills, sums, scores);
  });
  return {outs, pres, cands, fills, sums, scores};
}

// Returns {d_gx, d_fx, d_W_rec, d_R, d_U (empty when folded), d_c_b [k,N], d_c_x [], d_b0}.
std::vector<at::Tensor> tpru_backward(const at::Tensor& grad_in, const at::Tensor& fx_in, const at::Tensor& W_rec,
                                      const at::Tensor& R_slices, const at::Tensor& U_slices, const at::Tensor& c_x,
                                      const at::Tensor& b0, const at::Tensor& outs, const at::Tensor& pres,
                                      const at::Tensor& cands, const at::Tensor& fills, const at::Tensor& sums,
                                      const at::Tensor& scores, bool relu2, bool tanh_candidate) {
  const bool folded = U_slices.numel() == 0;
  const Dims m = dims_of(outs, fills, W_rec, folded, relu2, tanh_candidate);
  const int64_t T = m.T, B = m.B, d = m.d, k = m.k, N = m.N, s = m.s, rows = m.rows, kN = k * N;
  auto grad = grad_in.contiguous(), fx = fx_in.contiguous();
  auto opts = outs.options();
  auto d_pre = at::empty({T, B, rows}, opts);
  auto d_fb_all = folded ? at::Tensor() : at::empty({T, B, k, N}, opts);
  auto d_fx = at::empty({T, B, k, N}, opts);
  auto d_cand_all = at::empty({T, B, d}, opts);
  auto d_f = at::empty({B, k, N}, opts);
  auto carry = at::zeros({B, d}, opts);
  std::vector<at::Tensor> R_j, U_T;
  for (int64_t j = 0; j < k; ++j) {
    R_j.push_back(R_slices.select(0, j));  // [s, N]
    if (!folded) U_T.push_back(U_slices.select(0, j).t());  // [N, s]
  }
  AT_DISPATCH_FLOATING_TYPES(outs.scalar_type(), "tpru_backward", [&] {
    backward_loop<scalar_t>(m, grad, fx, W_rec, R_j, U_T, c_x, b0, outs, pres, cands, fills, sums, scores, d_pre,
                            d_fb_all, d_fx, d_cand_all, d_f, carry);
  });
  // Weight gradients after the loop, one large matmul each: ∂W_rec = Σ_t ∂pre_tᵀ b_{t-1}.
  const int64_t TB = T * B;
  auto flat = [&](const at::Tensor& x, int64_t width) { return x.reshape({-1, width}); };
  at::Tensor d_W_rec = at::mm(d_pre.select(0, 0).t(), b0);
  if (T > 1) d_W_rec.addmm_(flat(d_pre.narrow(0, 1, T - 1), rows).t(), flat(outs.narrow(0, 0, T - 1), d));
  at::Tensor d_cand_flat = flat(d_cand_all, d), fills_flat = flat(fills, kN);
  at::Tensor d_R = at::empty({k, s, N}, opts);
  for (int64_t j = 0; j < k; ++j)
    mm_into(d_R.select(0, j), d_cand_flat.narrow(1, j * s, s).t(), fills_flat.narrow(1, j * N, N));
  at::Tensor d_fb_flat = folded ? flat(d_pre, rows).narrow(1, d, kN) : flat(d_fb_all, kN);
  at::Tensor d_U = at::empty({0}, opts);
  if (!folded) {  // ∂U = Σ_t z_tᵀ ∂f_b,t per slice
    d_U = at::empty({k, s, N}, opts);
    for (int64_t j = 0; j < k; ++j) {
      at::Tensor out = d_U.select(0, j);
      at::Tensor dfb_j = d_fb_flat.narrow(1, j * N, N);
      if (rows > d) {
        at::mm_out(out, flat(pres, rows).narrow(1, d + j * s, s).t(), dfb_j);
      } else {  // z_t = b_{t-1}
        at::mm_out(out, b0.narrow(1, j * s, s).t(), dfb_j.narrow(0, 0, B));
        if (T > 1) out.addmm_(flat(outs.narrow(0, 0, T - 1), d).narrow(1, j * s, s).t(), dfb_j.narrow(0, B, TB - B));
      }
    }
  }
  at::Tensor d_c_b = (relu2 ? d_fb_flat : flat(d_fx, kN)).sum(0).view({k, N});
  at::Tensor d_c_x = d_fx.sum().reshape({});
  at::Tensor d_gx = d_pre.narrow(2, 0, d);
  return {d_gx, d_fx, d_W_rec, d_R, d_U, d_c_b, d_c_x, carry};
}

}  // namespace

TORCH_LIBRARY(tprbench, m) {
  m.def("tpru_forward(Tensor gx, Tensor fx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_b, Tensor c_x, "
        "Tensor b0, bool relu2, bool tanh_candidate) -> Tensor[]");
  m.def("tpru_backward(Tensor grad, Tensor fx, Tensor W_rec, Tensor R_slices, Tensor U_slices, Tensor c_x, Tensor b0, "
        "Tensor outs, Tensor pres, Tensor cands, Tensor fills, Tensor sums, Tensor scores, bool relu2, "
        "bool tanh_candidate) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tprbench, CPU, m) {
  m.impl("tpru_forward", &tpru_forward);
  m.impl("tpru_backward", &tpru_backward);
}
