// The ungated TPRN time loop (units/tprn_fused.py, TPRNRecurrence) in C++: the same ATen calls per
// step as the Python loop there, without the interpreter between them (at the sizes the benchmarks
// use, d = 64, a step's kernels take a few microseconds each, about what the Python dispatch of
// each costs). Forward per step: a_t = σ(pre_x[t] + v_{t−1} W_vᵀ), s = a_S Sᵀ, r = a_R Rᵀ,
// v_t = vec(s rᵀ); backward walks time for ∂v_t/∂v_{t−1} only, weight gradients after the loop as
// single matmuls. Registered as torch.ops.tprbench.tprn_forward / tprn_backward (built by
// units/tpru_ext.py with the TPRU recurrence).

#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

namespace {

// Returns {V [T,B,d_S·d_R], A [T,B,n], Sv [T,B,d_S], Rv [T,B,d_R]}.
std::vector<at::Tensor> tprn_forward(const at::Tensor& pre_x_in, const at::Tensor& W_v, const at::Tensor& S,
                                     const at::Tensor& R, const at::Tensor& v0, int64_t n_S) {
  const int64_t T = pre_x_in.size(0), B = pre_x_in.size(1), n = pre_x_in.size(2), d_S = S.size(0), d_R = R.size(0);
  auto V = at::empty({T, B, d_S * d_R}, pre_x_in.options());
  auto A = at::empty({T, B, n}, pre_x_in.options());
  auto Sv = at::empty({T, B, d_S}, pre_x_in.options());
  auto Rv = at::empty({T, B, d_R}, pre_x_in.options());
  // a_t starts as pre_x[t] for every step in one pass (from any strides), and each step adds
  // v_{t−1} W_vᵀ in place: addmm_out into a tensor other than its input would copy pre_x[t]
  // into it first, one small copy per step (the same arithmetic either way).
  A.copy_(pre_x_in);
  const at::Tensor W_vT = W_v.t(), S_T = S.t(), R_T = R.t();
  at::Tensor v = v0;
  for (int64_t t = 0; t < T; ++t) {
    at::Tensor a = A.select(0, t), s = Sv.select(0, t), r = Rv.select(0, t), vt = V.select(0, t);
    a.addmm_(v, W_vT);
    a.sigmoid_();
    at::mm_out(s, a.narrow(1, 0, n_S), S_T);
    at::mm_out(r, a.narrow(1, n_S, n - n_S), R_T);
    at::Tensor outer = vt.view({B, d_S, d_R});
    at::mul_out(outer, s.unsqueeze(2), r.unsqueeze(1));
    v = vt;
  }
  return {V, A, Sv, Rv};
}

// gV, gA may be empty (no gradient arrived). Returns {GZ [T,B,n], g_Wv, g_S, g_R, gv0}.
std::vector<at::Tensor> tprn_backward(const at::Tensor& gV_in, const at::Tensor& gA_in, const at::Tensor& W_v,
                                      const at::Tensor& S, const at::Tensor& R, const at::Tensor& v0,
                                      const at::Tensor& A, const at::Tensor& Sv, const at::Tensor& Rv,
                                      const at::Tensor& V, int64_t n_S) {
  const int64_t T = A.size(0), B = A.size(1), n = A.size(2), d_S = S.size(0), d_R = R.size(0);
  const bool has_gV = gV_in.numel() > 0, has_gA = gA_in.numel() > 0;
  const at::Tensor gV = has_gV ? gV_in.contiguous() : gV_in, gA = has_gA ? gA_in.contiguous() : gA_in;
  auto GZ = at::empty({T, B, n}, A.options());
  auto GS = at::empty({T, B, d_S}, A.options());
  auto GR = at::empty({T, B, d_R}, A.options());
  auto ga = at::empty({B, n}, A.options());
  at::Tensor gv = at::zeros({B, d_S * d_R}, A.options());
  for (int64_t t = T - 1; t >= 0; --t) {
    const at::Tensor g = has_gV ? gv + gV.select(0, t) : gv;
    const at::Tensor G = g.view({B, d_S, d_R});
    at::Tensor gs = GS.select(0, t), gr = GR.select(0, t);
    at::Tensor gs3 = gs.unsqueeze(2), gr3 = gr.unsqueeze(1);
    at::bmm_out(gs3, G, Rv.select(0, t).unsqueeze(2));  // ∂/∂s = G r
    at::bmm_out(gr3, Sv.select(0, t).unsqueeze(1), G);  // ∂/∂r = sᵀ G
    at::Tensor ga_S = ga.narrow(1, 0, n_S), ga_R = ga.narrow(1, n_S, n - n_S);
    at::mm_out(ga_S, gs, S);
    at::mm_out(ga_R, gr, R);
    if (has_gA) ga.add_(gA.select(0, t));
    const at::Tensor a = A.select(0, t);
    at::Tensor gz = GZ.select(0, t);
    at::mul_out(gz, ga, a * (1 - a));  // σ'
    gv = at::mm(gz, W_v);
  }
  const at::Tensor flat_gz = GZ.view({T * B, n});
  const at::Tensor V_prev = (T > 0 ? at::cat({v0.unsqueeze(0), V.narrow(0, 0, T - 1)}, 0) : V).reshape({T * B, d_S * d_R});
  const at::Tensor flat_A = A.view({T * B, n});
  at::Tensor g_Wv = at::mm(flat_gz.t(), V_prev);
  at::Tensor g_S = at::mm(GS.view({T * B, d_S}).t(), flat_A.narrow(1, 0, n_S));
  at::Tensor g_R = at::mm(GR.view({T * B, d_R}).t(), flat_A.narrow(1, n_S, n - n_S));
  return {GZ, g_Wv, g_S, g_R, gv};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(tprbench, m) {
  m.def("tprn_forward(Tensor pre_x, Tensor W_v, Tensor S, Tensor R, Tensor v0, int n_S) -> Tensor[]");
  m.def("tprn_backward(Tensor gV, Tensor gA, Tensor W_v, Tensor S, Tensor R, Tensor v0, Tensor A, Tensor Sv, "
        "Tensor Rv, Tensor V, int n_S) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tprbench, CPU, m) {
  m.impl("tprn_forward", &tprn_forward);
  m.impl("tprn_backward", &tprn_backward);
}
