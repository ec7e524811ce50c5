// bench/timing/src/candidates.cu: candidates timed side by side at one shape
// (candidates.h).
#include "normgate/bench/candidates.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda_check.h"
#include "device_buffer.h"
#include "normgate/bench/timing.h"
#include "normgate/harness/runner.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/seeds/case_id.h"

namespace normgate::kernels {

using detail::DeviceBuffer;

struct CandidateBench::Impl {
  int64_t heads = 1, stride = 0, stride_h = 0;  // elements
  DeviceBuffer x, dy, y, dx, u, h_new, dh_new, w, rstd, msq, dw, work;
  size_t work_bytes = 0;
};

CandidateBench::CandidateBench(int64_t H, WDtype w, Form form, int64_t t_max)
    : p_(std::make_unique<Impl>()), H_(H), t_max_(t_max), w_(w), form_(form) {
  const int64_t heads = heads_of(form);
  if (H < kMinH || H > kMaxH) throw std::invalid_argument("CandidateBench: H = " + std::to_string(H) + " out of range");
  if (heads > 1 && H != 256)
    throw std::invalid_argument("CandidateBench: per-head form needs H = 256, not " + std::to_string(H));
  if (t_max < 1 || t_max > kMaxT / heads)
    throw std::invalid_argument("CandidateBench: t_max = " + std::to_string(t_max) + " out of range");
  Impl& m = *p_;
  m.heads = heads;
  m.stride = form == Form::heads24 ? (24 + 8 + 8) * 256 : heads * H;
  m.stride_h = heads > 1 ? 256 : 0;
  const size_t rows = static_cast<size_t>(t_max * heads);
  const size_t elems = static_cast<size_t>(t_max) * static_cast<size_t>(m.stride);
  m.x = DeviceBuffer(2 * elems);
  m.dy = DeviceBuffer(2 * elems);
  m.y = DeviceBuffer(2 * elems);
  m.dx = DeviceBuffer(2 * elems);
  if (form == Form::res) {
    m.u = DeviceBuffer(2 * elems);
    m.h_new = DeviceBuffer(2 * elems);
    m.dh_new = DeviceBuffer(2 * elems);
  }
  m.w = DeviceBuffer(static_cast<size_t>(H) * (w == WDtype::bf16 ? 2 : 4));
  m.rstd = DeviceBuffer(4 * rows);
  m.msq = DeviceBuffer(8 * rows);
  m.dw = DeviceBuffer(4 * static_cast<size_t>(H));
  NG_CUDA(cudaMemset(m.y.get(), 0, 2 * elems));  // the gaps of a packed layout stay defined
  NG_CUDA(cudaMemset(m.dx.get(), 0, 2 * elems));

  seeds::CaseId c;
  c.H = H;
  c.T = t_max;
  c.w = w;
  c.form = form;
  c.family = seeds::Family::normal;
  DeviceInputBuffers b;
  b.x = m.x.as<uint16_t>();
  b.x_stride = m.stride;
  b.dy = m.dy.as<uint16_t>();
  b.dy_stride = m.stride;
  b.w = m.w.get();
  if (form == Form::res) {
    b.u = m.u.as<uint16_t>();
    b.u_stride = m.stride;
    b.dh_new = m.dh_new.as<uint16_t>();
    b.dh_new_stride = m.stride;
  }
  b.heads = heads;
  b.stride_h = m.stride_h;
  generate_device_inputs(c, b);
  // rstd and msq of every row for the backward (rows of a prefix T are the
  // prefix of the rows: r = t*heads + h).
  FwdArgs fa;
  fa.x = m.x.as<const uint16_t>();
  fa.x_stride = m.stride;
  fa.w = WeightView{w, m.w.get(), H};
  fa.y = m.y.as<uint16_t>();
  fa.y_stride = m.stride;
  fa.rstd = m.rstd.as<float>();
  fa.msq = m.msq.as<double>();
  fa.T = t_max;
  fa.H = H;
  fa.form = form;
  fa.heads = heads;
  fa.x_stride_h = fa.y_stride_h = m.stride_h;
  if (form == Form::res) {
    fa.u = m.u.as<const uint16_t>();
    fa.u_stride = m.stride;
    fa.h_new = m.h_new.as<uint16_t>();
    fa.h_new_stride = m.stride;
  }
  rmsnorm_fwd(default_fwd(), fa);
  NG_CUDA(cudaDeviceSynchronize());
}

CandidateBench::~CandidateBench() = default;

double CandidateBench::bytes(Op op, int64_t T) const {
  const double n = static_cast<double>(T) * static_cast<double>(heads_of(form_)) * static_cast<double>(H_);
  const double rows = static_cast<double>(T) * static_cast<double>(heads_of(form_));
  const double wb = static_cast<double>(H_) * (w_ == WDtype::bf16 ? 2 : 4);
  const bool res = form_ == Form::res;
  if (op == Op::fwd) return (res ? 8.0 : 4.0) * n + wb + 12.0 * rows;  // x (h, u) read; y (h_new) written; rstd, msq
  return (res ? 8.0 : 6.0) * n + wb + 12.0 * rows + 4.0 * static_cast<double>(H_);  // dy, x (dh_new) read; dx written
}

CandidateTimes CandidateBench::time(Op op, int64_t T, std::span<const Variant* const> cands, int rounds, int reps) {
  if (T < 1 || T > t_max_)
    throw std::invalid_argument("CandidateBench::time: T = " + std::to_string(T) + " out of 1.." + std::to_string(t_max_));
  if (rounds < 2) throw std::invalid_argument("CandidateBench::time: rounds = " + std::to_string(rounds) + " < 2");
  if (reps < 20) throw std::invalid_argument("CandidateBench::time: reps = " + std::to_string(reps) + " < 20");
  if (cands.empty()) throw std::invalid_argument("CandidateBench::time: no candidates");
  Impl& m = *p_;
  const WeightView wv{w_, m.w.get(), H_};
  for (const Variant* v : cands) {
    if (v->op != op || v->control)
      throw std::invalid_argument("CandidateBench::time: " + std::string(v->name) + " is not a " +
                                  std::string(to_string(op)) + " candidate");
    if (op == Op::bwd) {
      const size_t need = bwd_workspace_bytes(*v, T * m.heads, H_);
      if (need > m.work_bytes) {
        m.work = DeviceBuffer(need);
        m.work_bytes = need;
      }
    }
  }
  // One enqueue per candidate.
  auto enqueue = [&](const Variant* v, Stream s) {
    if (op == Op::fwd) {
      FwdArgs fa;
      fa.x = m.x.as<const uint16_t>();
      fa.x_stride = m.stride;
      fa.w = wv;
      fa.y = m.y.as<uint16_t>();
      fa.y_stride = m.stride;
      fa.rstd = m.rstd.as<float>();
      fa.msq = m.msq.as<double>();
      fa.T = T;
      fa.H = H_;
      fa.form = form_;
      fa.heads = m.heads;
      fa.x_stride_h = fa.y_stride_h = m.stride_h;
      if (form_ == Form::res) {
        fa.u = m.u.as<const uint16_t>();
        fa.u_stride = m.stride;
        fa.h_new = m.h_new.as<uint16_t>();
        fa.h_new_stride = m.stride;
      }
      rmsnorm_fwd(*v, fa, s);
    } else {
      BwdArgs ba;
      ba.dy = m.dy.as<const uint16_t>();
      ba.dy_stride = m.stride;
      ba.x = form_ == Form::res ? m.h_new.as<const uint16_t>() : m.x.as<const uint16_t>();
      ba.x_stride = m.stride;
      ba.w = wv;
      ba.rstd = m.rstd.as<const float>();
      ba.msq = m.msq.as<const double>();
      ba.dx = m.dx.as<uint16_t>();
      ba.dx_stride = m.stride;
      ba.dw = m.dw.as<float>();
      ba.T = T;
      ba.H = H_;
      ba.workspace = m.work.get();
      ba.workspace_bytes = m.work_bytes;
      ba.form = form_;
      ba.heads = m.heads;
      ba.dy_stride_h = ba.x_stride_h = ba.dx_stride_h = m.stride_h;
      if (form_ == Form::res) {
        ba.dh_new = m.dh_new.as<const uint16_t>();
        ba.dh_new_stride = m.stride;
      }
      rmsnorm_bwd(*v, ba, s);
    }
  };
  const size_t n = cands.size();
  CandidateTimes out;
  out.rounds_us.assign(n, {});
  std::vector<double> a2;  // the A/A repeat of candidate 0, per round
  for (int r = 0; r < rounds; ++r) {
    for (const size_t i : round_order(n, r)) {
      const auto t = time_graph([&](Stream s) { enqueue(cands[i == n ? 0 : i], s); }, reps);
      (i == n ? a2 : out.rounds_us[i]).push_back(t.median_ms * 1e3);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  };
  for (size_t i = 0; i < n; ++i) out.median_us.push_back(median(out.rounds_us[i]));
  for (int r = 0; r < rounds; ++r) {
    const double a = out.rounds_us[0][static_cast<size_t>(r)], b = a2[static_cast<size_t>(r)];
    out.aa_floor = std::max(out.aa_floor, std::fabs(a - b) / std::min(a, b));
  }
  out.aa_rounds_us = a2;
  return out;
}

}  // namespace normgate::kernels
