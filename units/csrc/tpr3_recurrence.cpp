// The TPR-RNN update loop (unit `tpr3`, units/tpr_rnn.py) in C++: forward and backward over time,
// per example in plain loops over its order-3 memory F ∈ R^{E×R×E}.
//
// Why: a step is ~12 small tensor ops (two batched matmuls, outer products, stacks) on tensors of
// E·R·E floats per example; from Python, with autograd recording each and replaying it backward,
// the interpreter and dispatcher cost most of the time at the sizes the benchmarks and bAbI use
// (E·R·E = 64 … 3,375). Here a step is three passes over F per example (forward), five (backward),
// parallel over the batch. Built with the TPRU recurrence by units/tpru_ext.py, registered as
// torch.ops.tprbench.tpr3_forward / tpr3_backward.
//
// Per step (all retrievals read F_{t−1}; ret(F, a, ρ)_f = Σ_{e,r} a_e ρ_r F[e, r, f]):
//   ŵ = ret(F, e1, r1)   m̂ = ret(F, e1, r2)   b̂ = ret(F, e2, r3)
//   F_t = F + e1 ⊗ (r1 ⊗ (e2 − ŵ) + r2 ⊗ (ŵ − m̂)) + e2 ⊗ r3 ⊗ (e1 − b̂)
// r2 / r3 absent (empty tensors) drop move / backlink. Rows past their length keep F unchanged.
// Arguments: e1, e2 [T, B, E], r1, r2, r3 [T, B, R] (any strides, inner dimension contiguous after
// `contiguous()`), F0 [B, E·R·E], lengths int64 [B] (empty: all T). Saved: outs [T, B, E·R·E]
// (F_t), hats [T, B, 3, E] (ŵ, m̂, b̂). Backward takes ∂L/∂F_t of every step, or of the last alone.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

namespace {

struct Tpr3Dims {
  int64_t T, B, E, R;
  bool move, back;
};

int64_t tpr3_grain(int64_t per_row) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, per_row)); }

template <typename scalar_t>
void tpr3_forward_loop(const Tpr3Dims& m, const scalar_t* e1p, const scalar_t* e2p, const scalar_t* r1p,
                       const scalar_t* r2p, const scalar_t* r3p, const scalar_t* F0, const int64_t* len,
                       scalar_t* outs, scalar_t* hats) {
  const int64_t T = m.T, B = m.B, E = m.E, R = m.R, RE = R * E, ERE = E * RE;
  at::parallel_for(0, B, tpr3_grain(T * 4 * ERE), [&](int64_t lo, int64_t hi) {
    std::vector<scalar_t> readA(RE), readB(RE), A(E), Bm(E), C(E), by1(RE), by2(RE);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n_steps = len ? len[i] : T;
      const scalar_t* F = F0 + i * ERE;
      for (int64_t t = 0; t < T; ++t) {
        scalar_t* Fn = outs + (t * B + i) * ERE;
        scalar_t* h = hats + (t * B + i) * 3 * E;
        if (t >= n_steps) {  // padding: F stays
          std::copy_n(F, ERE, Fn);
          std::fill_n(h, 3 * E, scalar_t(0));
          F = Fn;
          continue;
        }
        const int64_t o = (t * B + i);
        const scalar_t* e1 = e1p + o * E;
        const scalar_t* e2 = e2p + o * E;
        const scalar_t* r1 = r1p + o * R;
        const scalar_t* r2 = m.move ? r2p + o * R : nullptr;
        const scalar_t* r3 = m.back ? r3p + o * R : nullptr;
        // readA = e1ᵀ F, readB = e2ᵀ F (contracting the first axis): [R, E] each
        std::fill(readA.begin(), readA.end(), scalar_t(0));
        std::fill(readB.begin(), readB.end(), scalar_t(0));
        for (int64_t e = 0; e < E; ++e) {
          const scalar_t a = e1[e], b = m.back ? e2[e] : scalar_t(0);
          const scalar_t* Fe = F + e * RE;
          for (int64_t q = 0; q < RE; ++q) readA[q] += a * Fe[q];
          if (m.back)
            for (int64_t q = 0; q < RE; ++q) readB[q] += b * Fe[q];
        }
        scalar_t* w_hat = h;
        scalar_t* m_hat = h + E;
        scalar_t* b_hat = h + 2 * E;
        std::fill_n(h, 3 * E, scalar_t(0));
        for (int64_t r = 0; r < R; ++r) {
          const scalar_t* ra = readA.data() + r * E;
          for (int64_t f = 0; f < E; ++f) w_hat[f] += r1[r] * ra[f];
          if (m.move)
            for (int64_t f = 0; f < E; ++f) m_hat[f] += r2[r] * ra[f];
          if (m.back) {
            const scalar_t* rb = readB.data() + r * E;
            for (int64_t f = 0; f < E; ++f) b_hat[f] += r3[r] * rb[f];
          }
        }
        for (int64_t f = 0; f < E; ++f) {
          A[f] = e2[f] - w_hat[f];
          Bm[f] = w_hat[f] - m_hat[f];
          C[f] = e1[f] - b_hat[f];
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t f = 0; f < E; ++f) {
            by1[r * E + f] = r1[r] * A[f] + (m.move ? r2[r] * Bm[f] : scalar_t(0));
            by2[r * E + f] = m.back ? r3[r] * C[f] : scalar_t(0);
          }
        for (int64_t e = 0; e < E; ++e) {
          const scalar_t a = e1[e], b = m.back ? e2[e] : scalar_t(0);
          const scalar_t* Fe = F + e * RE;
          scalar_t* Fo = Fn + e * RE;
          for (int64_t q = 0; q < RE; ++q) Fo[q] = Fe[q] + (a * by1[q] + b * by2[q]);
        }
        F = Fn;
      }
    }
  });
}

template <typename scalar_t>
void tpr3_backward_loop(const Tpr3Dims& m, const scalar_t* go, const scalar_t* e1p, const scalar_t* e2p,
                        const scalar_t* r1p, const scalar_t* r2p, const scalar_t* r3p, const scalar_t* F0,
                        const int64_t* len, const scalar_t* outs, const scalar_t* hats, scalar_t* de1p, scalar_t* de2p,
                        scalar_t* dr1p, scalar_t* dr2p, scalar_t* dr3p, scalar_t* dF0, bool final_only) {
  const int64_t T = m.T, B = m.B, E = m.E, R = m.R, RE = R * E, ERE = E * RE;
  at::parallel_for(0, B, tpr3_grain(T * 6 * ERE), [&](int64_t lo, int64_t hi) {
    std::vector<scalar_t> G(ERE), A(E), Bm(E), C(E), by1(RE), by2(RE), dby1(RE), dby2(RE), dw(E), dm(E), db(E),
        q1(E * R), q2(E * R), q3(E * R);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n_steps = len ? len[i] : T;
      std::fill(G.begin(), G.end(), scalar_t(0));
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t o = t * B + i;
        if (!final_only || t == T - 1) {
          const scalar_t* g_out = go + (final_only ? i : o) * ERE;
          for (int64_t q = 0; q < ERE; ++q) G[q] += g_out[q];  // G = ∂L/∂F_t
        }
        scalar_t* de1 = de1p + o * E;
        scalar_t* de2 = de2p + o * E;
        scalar_t* dr1 = dr1p + o * R;
        scalar_t* dr2 = m.move ? dr2p + o * R : nullptr;
        scalar_t* dr3 = m.back ? dr3p + o * R : nullptr;
        if (t >= n_steps) {  // padding: F_t = F_{t−1}, no gradient to the keys
          std::fill_n(de1, E, scalar_t(0));
          std::fill_n(de2, E, scalar_t(0));
          std::fill_n(dr1, R, scalar_t(0));
          if (dr2) std::fill_n(dr2, R, scalar_t(0));
          if (dr3) std::fill_n(dr3, R, scalar_t(0));
          continue;
        }
        const scalar_t* e1 = e1p + o * E;
        const scalar_t* e2 = e2p + o * E;
        const scalar_t* r1 = r1p + o * R;
        const scalar_t* r2 = m.move ? r2p + o * R : nullptr;
        const scalar_t* r3 = m.back ? r3p + o * R : nullptr;
        const scalar_t* h = hats + o * 3 * E;
        const scalar_t* Fp = t > 0 ? outs + ((t - 1) * B + i) * ERE : F0 + i * ERE;  // F_{t−1}
        for (int64_t f = 0; f < E; ++f) {
          A[f] = e2[f] - h[f];
          Bm[f] = h[f] - h[E + f];
          C[f] = e1[f] - h[2 * E + f];
        }
        for (int64_t r = 0; r < R; ++r)
          for (int64_t f = 0; f < E; ++f) {
            by1[r * E + f] = r1[r] * A[f] + (m.move ? r2[r] * Bm[f] : scalar_t(0));
            by2[r * E + f] = m.back ? r3[r] * C[f] : scalar_t(0);
          }
        // ΔF = e1 ⊗ by1 + e2 ⊗ by2: ∂by = eᵀ G, ∂e[e] = ⟨G[e], by⟩
        std::fill(dby1.begin(), dby1.end(), scalar_t(0));
        std::fill(dby2.begin(), dby2.end(), scalar_t(0));
        for (int64_t e = 0; e < E; ++e) {
          const scalar_t* Ge = G.data() + e * RE;
          scalar_t s1 = 0, s2 = 0;
          for (int64_t q = 0; q < RE; ++q) {
            dby1[q] += e1[e] * Ge[q];
            s1 += Ge[q] * by1[q];
          }
          if (m.back)
            for (int64_t q = 0; q < RE; ++q) {
              dby2[q] += e2[e] * Ge[q];
              s2 += Ge[q] * by2[q];
            }
          de1[e] = s1;
          de2[e] = s2;
        }
        // by1 = r1 ⊗ A + r2 ⊗ Bm, by2 = r3 ⊗ C, A = e2 − ŵ, Bm = ŵ − m̂, C = e1 − b̂
        std::fill(dw.begin(), dw.end(), scalar_t(0));
        std::fill(dm.begin(), dm.end(), scalar_t(0));
        std::fill(db.begin(), db.end(), scalar_t(0));
        for (int64_t r = 0; r < R; ++r) {
          const scalar_t* d1 = dby1.data() + r * E;
          scalar_t s1 = 0, s2 = 0, s3 = 0;
          for (int64_t f = 0; f < E; ++f) {
            s1 += d1[f] * A[f];
            dw[f] += r1[r] * d1[f];  // u1 (∂A), for now
          }
          dr1[r] = s1;
          if (m.move) {
            for (int64_t f = 0; f < E; ++f) {
              s2 += d1[f] * Bm[f];
              dm[f] += r2[r] * d1[f];  // u2 (∂Bm), for now
            }
            dr2[r] = s2;
          }
          if (m.back) {
            const scalar_t* d2 = dby2.data() + r * E;
            for (int64_t f = 0; f < E; ++f) {
              s3 += d2[f] * C[f];
              db[f] += r3[r] * d2[f];  // u3 (∂C), for now
            }
            dr3[r] = s3;
          }
        }
        for (int64_t f = 0; f < E; ++f) {
          const scalar_t u1 = dw[f], u2 = dm[f], u3 = db[f];
          de2[f] += u1;       // A = e2 − ŵ
          de1[f] += u3;       // C = e1 − b̂
          dw[f] = u2 - u1;    // ∂ŵ
          dm[f] = -u2;        // ∂m̂
          db[f] = -u3;        // ∂b̂
        }
        // Through the retrievals from F_{t−1}: q[e][r] = Σ_f F_{t−1}[e, r, f] ∂hat_f
        for (int64_t e = 0; e < E; ++e)
          for (int64_t r = 0; r < R; ++r) {
            const scalar_t* row = Fp + e * RE + r * E;
            scalar_t s1 = 0, s2 = 0, s3 = 0;
            for (int64_t f = 0; f < E; ++f) {
              s1 += row[f] * dw[f];
              s2 += row[f] * dm[f];
              s3 += row[f] * db[f];
            }
            q1[e * R + r] = s1;
            q2[e * R + r] = s2;
            q3[e * R + r] = s3;
          }
        for (int64_t e = 0; e < E; ++e) {
          scalar_t a1 = 0, a2 = 0;
          for (int64_t r = 0; r < R; ++r) {
            a1 += r1[r] * q1[e * R + r] + (m.move ? r2[r] * q2[e * R + r] : scalar_t(0));
            a2 += m.back ? r3[r] * q3[e * R + r] : scalar_t(0);
          }
          de1[e] += a1;
          de2[e] += a2;
        }
        for (int64_t r = 0; r < R; ++r) {
          scalar_t a1 = 0, a2 = 0, a3 = 0;
          for (int64_t e = 0; e < E; ++e) {
            a1 += e1[e] * q1[e * R + r];
            a2 += e1[e] * q2[e * R + r];
            a3 += e2[e] * q3[e * R + r];
          }
          dr1[r] += a1;
          if (m.move) dr2[r] += a2;
          if (m.back) dr3[r] += a3;
        }
        // ∂F_{t−1} = G + e1 ⊗ (r1 ⊗ ∂ŵ + r2 ⊗ ∂m̂) + e2 ⊗ r3 ⊗ ∂b̂
        for (int64_t e = 0; e < E; ++e) {
          scalar_t* Ge = G.data() + e * RE;
          for (int64_t r = 0; r < R; ++r) {
            const scalar_t c1 = e1[e] * r1[r], c2 = m.move ? e1[e] * r2[r] : scalar_t(0),
                           c3 = m.back ? e2[e] * r3[r] : scalar_t(0);
            scalar_t* g = Ge + r * E;
            for (int64_t f = 0; f < E; ++f) g[f] += c1 * dw[f] + c2 * dm[f] + c3 * db[f];
          }
        }
      }
      std::copy_n(G.data(), ERE, dF0 + i * ERE);
    }
  });
}

Tpr3Dims tpr3_dims(const at::Tensor& e1, const at::Tensor& r1, const at::Tensor& r2, const at::Tensor& r3) {
  Tpr3Dims m;
  m.T = e1.size(0); m.B = e1.size(1); m.E = e1.size(2); m.R = r1.size(2);
  m.move = r2.numel() > 0; m.back = r3.numel() > 0;
  return m;
}

template <typename scalar_t>
const scalar_t* ptr_or_null(const at::Tensor& x) { return x.numel() > 0 ? x.data_ptr<scalar_t>() : nullptr; }

std::vector<at::Tensor> tpr3_forward(const at::Tensor& e1_in, const at::Tensor& e2_in, const at::Tensor& r1_in,
                                     const at::Tensor& r2_in, const at::Tensor& r3_in, const at::Tensor& F0_in,
                                     const at::Tensor& lengths_in) {
  auto e1 = e1_in.contiguous(), e2 = e2_in.contiguous(), r1 = r1_in.contiguous(), r2 = r2_in.contiguous(),
       r3 = r3_in.contiguous(), F0 = F0_in.contiguous();
  auto lengths = lengths_in.numel() > 0 ? lengths_in.to(at::kLong).contiguous() : lengths_in;
  Tpr3Dims m = tpr3_dims(e1, r1, r2, r3);
  const int64_t ERE = m.E * m.R * m.E;
  TORCH_CHECK(F0.size(1) == ERE, "tpr3_forward: F0 has ", F0.size(1), " columns, E·R·E = ", ERE);
  auto outs = at::empty({m.T, m.B, ERE}, e1.options());
  auto hats = at::empty({m.T, m.B, 3, m.E}, e1.options());
  AT_DISPATCH_FLOATING_TYPES(e1.scalar_type(), "tpr3_forward", [&] {
    tpr3_forward_loop<scalar_t>(m, e1.data_ptr<scalar_t>(), e2.data_ptr<scalar_t>(), r1.data_ptr<scalar_t>(),
                                ptr_or_null<scalar_t>(r2), ptr_or_null<scalar_t>(r3), F0.data_ptr<scalar_t>(),
                                lengths.numel() > 0 ? lengths.data_ptr<int64_t>() : nullptr,
                                outs.data_ptr<scalar_t>(), hats.data_ptr<scalar_t>());
  });
  return {outs, hats};
}

// Returns {d_e1, d_e2, d_r1, d_r2, d_r3 (empty where the operation is off), d_F0}.
std::vector<at::Tensor> tpr3_backward(const at::Tensor& grad_in, const at::Tensor& e1_in, const at::Tensor& e2_in,
                                      const at::Tensor& r1_in, const at::Tensor& r2_in, const at::Tensor& r3_in,
                                      const at::Tensor& F0_in, const at::Tensor& lengths_in, const at::Tensor& outs,
                                      const at::Tensor& hats) {
  auto grad = grad_in.contiguous(), e1 = e1_in.contiguous(), e2 = e2_in.contiguous(), r1 = r1_in.contiguous(),
       r2 = r2_in.contiguous(), r3 = r3_in.contiguous(), F0 = F0_in.contiguous();
  auto lengths = lengths_in.numel() > 0 ? lengths_in.to(at::kLong).contiguous() : lengths_in;
  Tpr3Dims m = tpr3_dims(e1, r1, r2, r3);
  // grad [T, B, E·R·E] is ∂L/∂F_t for every step; [B, E·R·E] is ∂L/∂F_T alone (`memory`: the steps'
  // outputs unused), which spares autograd a zero-filled [T, B, E·R·E] (at bAbI sizes ~40 MB a batch).
  const bool final_only = grad.dim() == 2;
  TORCH_CHECK(grad.size(-1) == m.E * m.R * m.E && grad.size(-2) == m.B && (final_only || grad.size(0) == m.T),
              "tpr3_backward: grad has shape ", grad.sizes(), ", expected [T, B, E·R·E] or [B, E·R·E]");
  // Zeroed, not empty: the loop adds into each of these after its first write, and under torch's
  // deterministic mode `empty` is NaN-filled, so a path that skipped the first write would show.
  // Everything else the loop uses is its own per-call, per-thread std::vector (nothing static).
  auto d_e1 = at::zeros_like(e1), d_e2 = at::zeros_like(e2), d_r1 = at::zeros_like(r1);
  auto d_r2 = m.move ? at::zeros_like(r2) : at::empty({0}, r1.options());
  auto d_r3 = m.back ? at::zeros_like(r3) : at::empty({0}, r1.options());
  auto d_F0 = at::zeros_like(F0);
  AT_DISPATCH_FLOATING_TYPES(e1.scalar_type(), "tpr3_backward", [&] {
    tpr3_backward_loop<scalar_t>(m, grad.data_ptr<scalar_t>(), e1.data_ptr<scalar_t>(), e2.data_ptr<scalar_t>(),
                                 r1.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(r2), ptr_or_null<scalar_t>(r3),
                                 F0.data_ptr<scalar_t>(), lengths.numel() > 0 ? lengths.data_ptr<int64_t>() : nullptr,
                                 outs.data_ptr<scalar_t>(), hats.data_ptr<scalar_t>(), d_e1.data_ptr<scalar_t>(),
                                 d_e2.data_ptr<scalar_t>(), d_r1.data_ptr<scalar_t>(),
                                 m.move ? d_r2.data_ptr<scalar_t>() : nullptr,
                                 m.back ? d_r3.data_ptr<scalar_t>() : nullptr, d_F0.data_ptr<scalar_t>(), final_only);
  });
  return {d_e1, d_e2, d_r1, d_r2, d_r3, d_F0};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tprbench, m) {
  m.def("tpr3_forward(Tensor e1, Tensor e2, Tensor r1, Tensor r2, Tensor r3, Tensor F0, Tensor lengths) -> Tensor[]");
  m.def("tpr3_backward(Tensor grad, Tensor e1, Tensor e2, Tensor r1, Tensor r2, Tensor r3, Tensor F0, Tensor lengths, "
        "Tensor outs, Tensor hats) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tprbench, CPU, m) {
  m.impl("tpr3_forward", &tpr3_forward);
  m.impl("tpr3_backward", &tpr3_backward);
}
