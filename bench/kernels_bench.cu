// bench/kernels_bench.cu: first speed numbers of the v1 kernels on the GPU.
//
// Method (issue 3): each call is captured in a CUDA graph and replayed with the
// L2 flushed before every replay (cold L2); CUDA events around the replay;
// median of `reps` (default 100) replays. Achieved bandwidth counts the bytes
// the op must move once (inputs read once, outputs written once; workspace
// traffic is NOT counted: it is overhead the kernel pays) over the median
// time, and is printed against a 16-byte vectorized device-to-device copy
// timed the same way in the same run.
//
// Usage: kernels_bench [--reps N] [--json FILE] [--depth F:L[:B[:R[:S[:Q[:W]]]]],...] [--no-controls] [--copy-variants]
//                      [--res] [--w bf16|fp32|both] [T,H ...]
// (default shapes 65537,4096 and 131072,6144; weight both). --depth times
// every op at each forward pipeline setting F:L[:B[:R[:S[:Q[:W]]]]] (pipeline.h: ring
// depth F, L2 prefetch distance L, B rows per team per CTA instead of a
// persistent grid, R = 1: form res fused (the default when R is omitted), 0: two
// kernels; S = 1 (the default when omitted; 0 to time the ring at F, L, B):
// the simple forward, one row per team, no ring; Q = 1 (the
// default when omitted): the same for form res fused; W = 1 (the default
// when omitted): only a team's first warp computes rstd; outputs do
// not depend on them), in
// one run, so the rows compare side by side. --res adds the forward of form
// res (h = x, u = dy's data) and each real backward of form res (dh_new =
// the plain forward's y). Prints a table last.
#include <algorithm>
#include <cuda_runtime.h>

#include <charconv>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bwd_det_chunked.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/registry.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/harness/runner.h"
#include "normgate/bench/timing.h"
#include "normgate/seeds/case_id.h"

#include "fwd_l2pass.cuh"
#include "fwd_narrow.cuh"
#include "combine_cols.cuh"
#include "fwd_rows.cuh"
#include "fwd_smem.cuh"

namespace nk = normgate::kernels;
using normgate::WDtype;

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess)                                                                        \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_));              \
  } while (0)

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t n) { CK(cudaMalloc(&p, n < 16 ? 16 : n)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

struct Row {
  std::string shape, w, op;
  double median_us, min_us, gbps, frac_copy;
};

// --copy-variants: copy kernels that differ in one way each from
// copy_vec16 (grid-stride, 4 loads in flight per thread, streaming hints), to
// find what reaches the H200's DRAM ceiling (docs/perf/peers.md, D2:
// copy_vec16 3.87 TB/s, a Triton copy 4.10, torch.compile's forward 4.25-4.34
// moving the same bytes).
// Bench-only kernels; the library's copy_vec16 is the reference row.
namespace copyx {
/// Grid-stride, kU loads in flight per thread; kHints: __ldcs/__stcs
/// (evict-first) instead of plain ld.global / st.global.
template <int kU, bool kHints>
__global__ void __launch_bounds__(256) stride_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kU - 1) * step < n; i += kU * step) {
    uint4 v[kU];
#pragma unroll
    for (int k = 0; k < kU; ++k) v[k] = kHints ? __ldcs(src + i + k * step) : src[i + k * step];
#pragma unroll
    for (int k = 0; k < kU; ++k) {
      if (kHints) {
        __stcs(dst + i + k * step, v[k]);
      } else {
        dst[i + k * step] = v[k];
      }
    }
  }
  for (; i < n; i += step) dst[i] = src[i];
}
/// One tile of kU x 256 16-byte words per CTA (a grid as large as the data,
/// scheduled by the hardware, as Triton launches), plain loads and stores.
template <int kU>
__global__ void __launch_bounds__(256) tile_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t n) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kU * 256) + threadIdx.x;
  uint4 v[kU];
#pragma unroll
  for (int k = 0; k < kU; ++k)
    if (base + k * 256 < n) v[k] = src[base + k * 256];
#pragma unroll
  for (int k = 0; k < kU; ++k)
    if (base + k * 256 < n) dst[base + k * 256] = v[k];
}
}  // namespace copyx

namespace {
/// The comma-separated items of v, empty ones included ("2,,4" -> "2", "", "4";
/// "" -> one empty item), so an option's check refuses them.
std::vector<std::string> comma_items(const std::string& v) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= v.size();) {
    const size_t e = std::min(v.find(',', pos), v.size());
    out.push_back(v.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

/// Rows whose rstd, msq (when with_msq) or y differ bitwise between two
/// forward runs on the device: a (rstd ra, msq ma, y ya) and b; `ybytes`
/// bytes of y each, row r's H elements at element offset row_at(r). When
/// ry is given, *ry gets the rows of those whose rstd or y differs.
template <class RowAt>
int64_t rows_differ(const void* ya, const void* yb, size_t ybytes, const float* ra, const float* rb, const double* ma,
                    const double* mb, int64_t rows, int64_t H, bool with_msq, RowAt row_at, int64_t* ry = nullptr) {
  std::vector<uint16_t> ha(ybytes / 2), hb(ybytes / 2);
  std::vector<float> fa(static_cast<size_t>(rows)), fb(static_cast<size_t>(rows));
  std::vector<double> da(static_cast<size_t>(rows)), db(static_cast<size_t>(rows));
  CK(cudaMemcpy(ha.data(), ya, ybytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), yb, ybytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(fa.data(), ra, 4 * rows, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(fb.data(), rb, 4 * rows, cudaMemcpyDeviceToHost));
  if (with_msq) {
    CK(cudaMemcpy(da.data(), ma, 8 * rows, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(db.data(), mb, 8 * rows, cudaMemcpyDeviceToHost));
  }
  int64_t n = 0, n_ry = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t i = static_cast<size_t>(r), at = row_at(r);
    const bool d_ry = std::memcmp(&fa[i], &fb[i], 4) != 0 ||
                      std::memcmp(ha.data() + at, hb.data() + at, 2 * static_cast<size_t>(H)) != 0;
    n_ry += d_ry;
    n += d_ry || (with_msq && std::memcmp(&da[i], &db[i], 8) != 0);
  }
  if (ry != nullptr) *ry = n_ry;
  return n;
}
}  // namespace

int main(int argc, char** argv) try {
  int reps = 100;
  std::string json;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  bool controls = true;
  bool res = false;  // also time form res (forward and real backward variants)
  bool heads = false;  // also time the per-head forms at H = 256 (heads4 contiguous, heads24 strided)
  bool copy_variants = false;  // also time the copyx kernels against copy_vec16
  bool fwd_exp = false;        // also time bench/fwd_l2pass.cuh's forward experiment
  std::vector<int> combine_cols;  // also time bench/combine_cols.cuh with these columns a CTA (--combine-cols 8,16)
  std::vector<fwdsmem::SmemSetting> fwd_smem;  // also time bench/fwd_smem.cuh (--fwd-smem S:B,...)
  std::vector<fwdrows::RowsSetting> fwd_rows;  // also time bench/fwd_rows.cuh with these settings (--fwd-rows 2,1:4:0:0)
  struct NarrowSetting {
    int L, R, C, K;  // lanes a row, rows a lane, threads a CTA, cache hints (bench/fwd_narrow.cuh)
    std::string name() const {
      return std::to_string(L) + ":" + std::to_string(R) +
             (C == 256 && K == 0 ? "" : ":" + std::to_string(C)) + (K == 0 ? "" : ":" + std::to_string(K));
    }
  };
  std::vector<NarrowSetting> fwd_narrow;  // also time bench/fwd_narrow.cuh (--fwd-narrow L:R[:C[:K]],...) on rows of 256
  std::vector<WDtype> wds = {WDtype::bf16, WDtype::fp32};
  std::vector<std::string> only;  // --only: time only the rows whose op names one of these
  std::vector<nk::PipelineDepth> depths = {nk::pipeline_depth()};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "Usage: kernels_bench [--reps N (>= 50, default 100)] [--json FILE] [--w bf16|fp32|both]\n"
          "                     [--depth F:L[:B[:R[:S[:Q[:W]]]]],...] [--no-controls] [--res] [--heads] [--copy-variants] [--fwd-exp]\n"
          "                     [--fwd-rows R,...] [--fwd-narrow L:R[:C[:K]],...] [--fwd-smem S:B,...] [--combine-cols C,...] [--only NAME,...] [T,H ...]\n"
          "Times each op (CUDA-graph replay, cold L2, median of N) against a 16-byte copy; default shapes\n"
          "65537,4096 131072,6144. --depth: forward settings (pipeline.h: ring depth F, L2 prefetch L, rows\n"
          "per team per CTA B (0: persistent grid), fused res R, simple forward S (plain), Q (fused res), W (rstd by the team's first warp only)).\n"
          "--res adds form res; --heads adds, for shapes with H = 256, the per-head forms over the same T rows:\n"
          "heads4 ([T/4, 4, 256], contiguous) and heads24 ([T/24, 24, 256] as the q part of a packed qkv row of\n"
          "(24+8+8)*256); --copy-variants adds copy kernels that differ from the reference copy in\n"
          "one way each; --fwd-exp adds bench/fwd_l2pass.cuh's two-pass forward (plain rows, H % 8 == 0) and\n"
          "counts the rows where its rstd or y differs from the forward's; --fwd-rows R, R:S:B:F, R:S:B:F:P or R:S:B:F:P:K\n"
          "adds bench/fwd_rows.cuh's simple forward with R rows per team, S groups of 8 per thread, launch bound B, FP32\n"
          "sum F, weights loaded before the barrier P, cache hints K (bench/cache_hints.cuh; file comment;\n"
          "plain rows, H % 8 == 0, teams <= 512) and counts the rows where its rstd, msq or y differs (and, of\n"
          "those, where rstd or y does). --fwd-narrow L:R[:C[:K]] adds bench/fwd_narrow.cuh's forward for rows of 256\n"
          "(L lanes a row, R rows a lane: 8:1, 8:2, 16:1, 16:2, 32:2, 32:4; C threads a CTA, 128 or 256, default 256;\n"
          "K cache hints 0-4, default 0, K > 0 with 16:2:256 only: the file's comment) on plain H = 256 and, with --heads, on\n"
          "the per-head views, counting the rows that differ from the routed forward. --fwd-smem S:B adds\n"
          "bench/fwd_smem.cuh's forward (fwd_rows 1:S's geometry and bits, the row staged in shared memory by cp.async, not\n"
          "held in registers; S 2 or 4, B 0 or 8 CTAs of 256 an SM at least), counting rows that differ. --only NAME,... times only\n"
          "the rows whose op contains one of the names (variant names or parts of them, fwd, bwd, res, heads4,\n"
          "heads24; e.g. fwd_narrow; the copy, the default forward and every --fwd-exp, --fwd-rows, --fwd-smem and --fwd-narrow row always).\n"
          "--combine-cols C,... times the deterministic backward's second stage alone, the library's (32 columns a CTA)\n"
          "beside bench/combine_cols.cuh's with C columns a CTA (4, 8, 16), on the same partials, and counts the dw\n"
          "columns that differ (expected 0).\n"
          "Needs a CUDA GPU.\n"
          "Source comment: bench/kernels_bench.cu.\n");
      return 0;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      const std::string v = argv[++i];
      only = comma_items(v);
      if (only.empty() || std::any_of(only.begin(), only.end(), [](const std::string& t) { return t.empty(); })) {
        std::fprintf(stderr, "kernels_bench: bad --only '%s': comma-separated names, none empty\n", v.c_str());
        return 2;
      }
      // Each name must be part of a variant's name or one of the ops' words,
      // so that a misspelt name is an error, not a run that times nothing.
      for (const std::string& t : only) {
        bool known = t == "fwd" || t == "bwd" || t == "res" || t == "heads4" || t == "heads24";
        for (const auto& var : nk::variants())  // model-only controls have no kernel to time
          known = known || (!var.model_only && std::string(var.name).find(t) != std::string::npos);
        if (!known) {
          std::fprintf(stderr,
                       "kernels_bench: bad --only '%s': '%s' is in no timed variant's name (nor fwd, bwd, res, heads4, "
                       "heads24)\n",
                       v.c_str(), t.c_str());
          return 2;
        }
      }
    } else if (a == "--no-controls") {
      controls = false;
    } else if (a == "--res") {
      res = true;
    } else if (a == "--heads") {
      heads = true;
    } else if (a == "--copy-variants") {
      copy_variants = true;
    } else if (a == "--fwd-exp") {
      fwd_exp = true;
    } else if (a == "--combine-cols" && i + 1 < argc) {
      const std::string v = argv[++i];
      for (const std::string& tok : comma_items(v)) {
        bool known = false;
        for (const int c : combinecols::kCombineCols) known = known || tok == std::to_string(c);
        if (!known) {
          std::fprintf(stderr, "kernels_bench: bad --combine-cols item '%s' in '%s': one of 4, 8, 16\n", tok.c_str(),
                       v.c_str());
          return 2;
        }
        combine_cols.push_back(std::stoi(tok));
      }
    } else if (a == "--fwd-rows" && i + 1 < argc) {
      const std::string v = argv[++i];
      for (std::string tok : comma_items(v)) {
        if (tok == "2" || tok == "4") tok += ":0:0:0";  // R alone: plan.h's slots
        bool known = false;
        for (const char* k : fwdrows::kRowsSettings) known = known || tok == k;
        if (!known) {
          std::string list;
          for (const char* k : fwdrows::kRowsSettings) list += std::string(list.empty() ? "" : ", ") + k;
          std::fprintf(stderr, "kernels_bench: bad --fwd-rows item '%s' in '%s': R (2 or 4), R:S:B:F, R:S:B:F:P or R:S:B:F:P:K, one of %s\n",
                       tok.c_str(), v.c_str(), list.c_str());
          return 2;
        }
        fwdrows::RowsSetting st;
        std::sscanf(tok.c_str(), "%d:%d:%d:%d:%d:%d", &st.rows, &st.slots, &st.min_b, &st.f32, &st.prew, &st.hint);
        fwd_rows.push_back(st);
      }
    } else if (a == "--fwd-smem" && i + 1 < argc) {
      const std::string v = argv[++i];
      for (const std::string& tok : comma_items(v)) {
        bool known = false;
        for (const char* k : fwdsmem::kSmemSettings) known = known || tok == k;
        if (!known) {
          std::fprintf(stderr, "kernels_bench: bad --fwd-smem item '%s' in '%s': S:B, one of 2:0, 4:0, 2:8, 4:8\n",
                       tok.c_str(), v.c_str());
          return 2;
        }
        fwdsmem::SmemSetting st;
        std::sscanf(tok.c_str(), "%d:%d", &st.slots, &st.min_b);
        fwd_smem.push_back(st);
      }
    } else if (a == "--fwd-narrow" && i + 1 < argc) {
      const std::string v = argv[++i];
      for (const std::string& tok : comma_items(v)) {
        const size_t c2 = tok.find(':', tok.find(':') + 1);
        const size_t c3 = c2 == std::string::npos ? std::string::npos : tok.find(':', c2 + 1);
        const std::string lr = tok.substr(0, c2);
        const std::string c = c2 == std::string::npos ? "256" : tok.substr(c2 + 1, c3 == std::string::npos ? std::string::npos : c3 - c2 - 1);
        const std::string k = c3 == std::string::npos ? "0" : tok.substr(c3 + 1);
        const bool k_ok = k.size() == 1 && k[0] >= '0' && k[0] <= '4' && (k == "0" || (lr == "16:2" && c == "256"));
        if ((lr != "8:1" && lr != "8:2" && lr != "16:1" && lr != "16:2" && lr != "32:2" && lr != "32:4") ||
            (c != "128" && c != "256") || !k_ok) {
          std::fprintf(stderr,
                       "kernels_bench: bad --fwd-narrow '%s' (item '%s'): L:R is one of 8:1, 8:2, 16:1, 16:2, 32:2, "
                       "32:4, optionally :C with C = 128 or 256 threads a CTA (default 256), then optionally :K, "
                       "cache hints 0-4 (K > 0 with 16:2:256 only), comma-separated\n",
                       v.c_str(), tok.c_str());
          return 2;
        }
        fwd_narrow.push_back({std::atoi(lr.c_str()), std::atoi(lr.c_str() + lr.find(':') + 1), std::atoi(c.c_str()),
                              std::atoi(k.c_str())});
      }
    } else if (a == "--w" && i + 1 < argc) {
      const std::string v = argv[++i];
      try {
        wds = v == "both" ? std::vector<WDtype>{WDtype::bf16, WDtype::fp32}
                          : std::vector<WDtype>{normgate::parse_wdtype(v)};
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "kernels_bench: bad --w: %s (or both)\n", e.what());
        return 2;
      }
    } else if (a == "--depth" && i + 1 < argc) {
      std::string list = argv[++i];
      depths.clear();
      for (size_t p0 = 0; p0 <= list.size();) {
        size_t p1 = list.find(',', p0);
        if (p1 == std::string::npos) p1 = list.size();
        const std::string item = list.substr(p0, p1 - p0);
        // F:L[:B[:R[:S[:Q[:W]]]]], each field a whole decimal number (R, S, Q, W: 0 or 1).
        std::vector<long> f;
        bool ok = !item.empty();
        for (size_t q0 = 0; ok && q0 <= item.size();) {
          size_t q1 = item.find(':', q0);
          if (q1 == std::string::npos) q1 = item.size();
          const std::string field = item.substr(q0, q1 - q0);
          char* e = nullptr;
          const long v = std::strtol(field.c_str(), &e, 10);
          ok = !field.empty() && e != nullptr && *e == '\0' && v >= INT_MIN && v <= INT_MAX;
          f.push_back(v);
          q0 = q1 + 1;
        }
        bool flags_ok = true;
        for (size_t q = 3; q < f.size(); ++q) flags_ok = flags_ok && (f[q] == 0 || f[q] == 1);
        if (!ok || f.size() < 2 || f.size() > 7 || !flags_ok) {
          std::fprintf(stderr,
                       "kernels_bench: bad --depth item '%s' (expected F:L, F:L:B, F:L:B:R, F:L:B:R:S, F:L:B:R:S:Q or "
                       "F:L:B:R:S:Q:W with R, S, Q, W 0 or 1)\n",
                       item.c_str());
          return 2;
        }
        nk::PipelineDepth d;
        d.fwd = static_cast<int>(f[0]);
        d.fwd_l2 = static_cast<int>(f[1]);
        d.fwd_block = f.size() > 2 ? static_cast<int>(f[2]) : 0;
        d.fwd_res_fused = f.size() > 3 ? f[3] == 1 : nk::PipelineDepth{}.fwd_res_fused;  // R omitted: the default
        d.fwd_simple = f.size() > 4 ? f[4] == 1 : nk::PipelineDepth{}.fwd_simple;
        d.fwd_res_simple = f.size() > 5 ? f[5] == 1 : nk::PipelineDepth{}.fwd_res_simple;
        d.fwd_rstd_warp = f.size() > 6 ? f[6] == 1 : nk::PipelineDepth{}.fwd_rstd_warp;
        try {
          nk::set_pipeline_depth(d);  // validates (throws naming the value)
        } catch (const std::invalid_argument& e) {
          std::fprintf(stderr, "kernels_bench: bad --depth item '%s': %s\n", item.c_str(), e.what());
          return 2;
        }
        depths.push_back(d);
        p0 = p1 + 1;
      }
    } else {
      const auto comma = a.find(',');
      if (comma == std::string::npos) {
        std::fprintf(stderr, "kernels_bench: bad argument '%s' (expected T,H)\n", a.c_str());
        return 2;
      }
      // T and H whole positive decimal numbers, each field entirely.
      const auto field = [&](size_t b, size_t e, int64_t& out) {
        const auto r = std::from_chars(a.data() + b, a.data() + e, out);
        return b < e && r.ec == std::errc() && r.ptr == a.data() + e && out > 0;
      };
      int64_t T = 0, H = 0;
      if (!field(0, comma, T) || !field(comma + 1, a.size(), H)) {
        std::fprintf(stderr, "kernels_bench: bad argument '%s' (expected T,H: two positive whole numbers)\n",
                     a.c_str());
        return 2;
      }
      shapes.emplace_back(T, H);
    }
  }
  if (reps < 50) {
    std::fprintf(stderr, "kernels_bench: --reps must be >= 50 (got %d)\n", reps);
    return 2;
  }
  if (shapes.empty()) shapes = {{65537, 4096}, {131072, 6144}};

  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "kernels_bench: no usable CUDA device (%s); it runs on the GPU machine (tools/h200.sh)\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CK(cudaDriverGetVersion(&driver));
  CK(cudaRuntimeGetVersion(&runtime));
  std::printf("gpu %s, %d SMs, L2 %d MiB, driver API %d, runtime %d, reps %d (median), cold L2\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, driver, runtime, reps);

  std::vector<Row> rows;
  for (auto [T, H] : shapes) {
    const size_t n = static_cast<size_t>(T) * static_cast<size_t>(H);
    // Copy ceiling for this shape: copy a buffer as large as x + dy.
    const size_t cbytes = (4 * n + 15) / 16 * 16;
    Buf csrc(cbytes), cdst(cbytes);
    CK(cudaMemset(csrc.p, 1, cbytes));
    const auto ct = nk::time_graph([&](nk::Stream s) { nk::copy_vec16(cdst.p, csrc.p, cbytes, s); }, reps);
    const double copy_gbps = 2.0 * cbytes / (ct.median_ms * 1e-3) / 1e9;
    const std::string shape = "[" + std::to_string(T) + ", " + std::to_string(H) + "]";
    rows.push_back({shape, "-", "copy (16 B vectors)", ct.median_ms * 1e3, ct.min_ms * 1e3, copy_gbps, 1.0});
    // Times `launch` (graph replay, cold L2) and adds its row: w, op, the bytes the op moves once.
    // --only filters the library's rows; an experiment row (--fwd-exp, --fwd-rows, --fwd-narrow) was asked
    // for by name and is always timed (its op reads "fwd narrow 16:2 ...", which "fwd_narrow" misses).
    auto time_row = [&](const std::string& w, const std::string& op, double bytes, auto&& launch) {
      const bool asked = op.find(" experiment") != std::string::npos;
      if (!asked && !only.empty() &&
          std::none_of(only.begin(), only.end(), [&](const std::string& t) { return op.find(t) != std::string::npos; }))
        return;
      const auto t = nk::time_graph(launch, reps);
      const double g = bytes / (t.median_ms * 1e-3) / 1e9;
      rows.push_back({shape, w, op, t.median_ms * 1e3, t.min_ms * 1e3, g, g / copy_gbps});
    };
    if (copy_variants) {
      const int64_t words = static_cast<int64_t>(cbytes / 16);
      auto* d16 = static_cast<uint4*>(cdst.p);
      const auto* s16 = static_cast<const uint4*>(csrc.p);
      const unsigned persistent = static_cast<unsigned>(prop.multiProcessorCount) * 8;  // 2048 threads per SM
      auto tiles = [&](int u) { return static_cast<unsigned>((words + 256 * u - 1) / (256 * u)); };
      const std::vector<std::pair<std::string, std::function<void(cudaStream_t)>>> kinds = {
          {"copy grid-stride u4 plain", [&](cudaStream_t st) { copyx::stride_copy<4, false><<<persistent, 256, 0, st>>>(d16, s16, words); }},
          {"copy grid-stride u8 hints", [&](cudaStream_t st) { copyx::stride_copy<8, true><<<persistent, 256, 0, st>>>(d16, s16, words); }},
          {"copy grid-stride u2 hints", [&](cudaStream_t st) { copyx::stride_copy<2, true><<<persistent, 256, 0, st>>>(d16, s16, words); }},
          {"copy tile u1 (one word per thread)", [&](cudaStream_t st) { copyx::tile_copy<1><<<tiles(1), 256, 0, st>>>(d16, s16, words); }},
          {"copy tile u4", [&](cudaStream_t st) { copyx::tile_copy<4><<<tiles(4), 256, 0, st>>>(d16, s16, words); }},
          {"copy tile u8", [&](cudaStream_t st) { copyx::tile_copy<8><<<tiles(8), 256, 0, st>>>(d16, s16, words); }},
      };
      for (const auto& [name, launch] : kinds) {
        if (name.rfind("copy tile", 0) == 0 && words / 256 > 0x7FFFFFFF) continue;  // grid too large
        time_row("-", name, 2.0 * cbytes, [&](nk::Stream st) {
          launch(static_cast<cudaStream_t>(st));
          CK(cudaGetLastError());
        });
      }
    }

    for (WDtype wd : wds) {
      const std::string wname(normgate::to_string(wd));
      normgate::seeds::CaseId c;
      c.H = H;
      c.T = T;
      c.w = wd;
      c.family = normgate::seeds::Family::normal;
      const size_t wbytes = static_cast<size_t>(H) * (wd == WDtype::bf16 ? 2 : 4);
      Buf x(2 * n), dy(2 * n), w(wbytes), y(2 * n), dx(2 * n), rstd(4 * T), dw(4 * H);
      Buf y_res(res ? 2 * n : 16), rstd_res(res ? 4 * T : 16);
      Buf msq(8 * T + 8), msq_res(res ? 8 * T + 8 : 16);  // the forward's m per row, for the backward (as the runner)
      nk::DeviceInputBuffers ib;
      ib.x = static_cast<uint16_t*>(x.p);
      ib.x_stride = H;
      ib.dy = static_cast<uint16_t*>(dy.p);
      ib.dy_stride = H;
      ib.w = w.p;
      nk::generate_device_inputs(c, ib);
      CK(cudaDeviceSynchronize());
      const normgate::WeightView wv{wd, w.p, H};

      nk::FwdArgs fa;
      fa.x = ib.x;
      fa.x_stride = H;
      fa.w = wv;
      fa.y = static_cast<uint16_t*>(y.p);
      fa.y_stride = H;
      fa.rstd = static_cast<float*>(rstd.p);
      fa.msq = static_cast<double*>(msq.p);
      fa.T = T;
      fa.H = H;
      fa.eps = 1e-6f;
      const auto& fwd = nk::default_fwd();
      nk::rmsnorm_fwd(fwd, fa);  // rstd for the backward
      CK(cudaDeviceSynchronize());
      for (const nk::PipelineDepth depth : depths) {
        nk::set_pipeline_depth(depth);
        // Every field spelled out (F:L:B:R:S:Q:W), so a label never depends on the defaults.
        const std::string dtag = depths.size() > 1 ? " d" + std::to_string(depth.fwd) + ":" + std::to_string(depth.fwd_l2) +
                                                   ":" + std::to_string(depth.fwd_block) + ":" +
                                                   (depth.fwd_res_fused ? "1" : "0") + ":" + (depth.fwd_simple ? "1" : "0") + ":" +
                                                   (depth.fwd_res_simple ? "1" : "0") + ":" + (depth.fwd_rstd_warp ? "1" : "0")
                                                   : "";
        const double fwd_bytes = 4.0 * n + wbytes + 12.0 * T;  // x read; y, rstd, msq written
        const auto ft = nk::time_graph([&](nk::Stream s) { nk::rmsnorm_fwd(fwd, fa, s); }, reps);
        const double fg = fwd_bytes / (ft.median_ms * 1e-3) / 1e9;
        if (res) {  // form res: h = x, u = dy's buffer (any BF16 data times the same), h_new into dx's
          nk::FwdArgs fr = fa;  // own y and rstd: the backward timings below keep the plain forward's rstd
          fr.y = static_cast<uint16_t*>(y_res.p);
          fr.rstd = static_cast<float*>(rstd_res.p);
          fr.msq = static_cast<double*>(msq_res.p);
          fr.form = normgate::Form::res;
          fr.u = ib.dy;
          fr.u_stride = H;
          fr.h_new = static_cast<uint16_t*>(dx.p);
          fr.h_new_stride = H;
          const double res_bytes = 8.0 * n + wbytes + 12.0 * T;  // h, u read; h_new, y, rstd, msq written
          time_row(wname, "fwd res " + std::string(fwd.name) + dtag, res_bytes,
                   [&](nk::Stream s) { nk::rmsnorm_fwd(fwd, fr, s); });
          for (const auto& v : nk::variants())  // the other forward variants (pipeline knobs do not apply)
            if (v.op == nk::Op::fwd && &v != &fwd && v.supports_h(H) && depth.fwd == depths.front().fwd)
              time_row(wname, "fwd res " + std::string(v.name), res_bytes,
                       [&](nk::Stream s) { nk::rmsnorm_fwd(v, fr, s); });
        }
        // The other forward variants on the same rows (the same bits: they
        // rewrite fa's y, rstd, msq with what the default wrote; pipeline
        // knobs do not apply to them, so once per shape).
        for (const auto& v : nk::variants())
          if (v.op == nk::Op::fwd && &v != &fwd && v.supports_h(H) && depth.fwd == depths.front().fwd)
            time_row(wname, "fwd " + std::string(v.name), fwd_bytes, [&](nk::Stream s) { nk::rmsnorm_fwd(v, fa, s); });
        rows.push_back({shape, wname, "fwd " + std::string(fwd.name) + dtag,
                        ft.median_ms * 1e3, ft.min_ms * 1e3, fg, fg / copy_gbps});
        // A forward experiment into its own buffers (poisoned first), compared
        // with the forward's y, rstd (and msq, when the experiment writes it),
        // then timed. run_exp(stream, y, rstd, msq) returns false when it does
        // not cover the shape (nothing timed).
        auto experiment = [&](const std::string& label, bool with_msq, auto run_exp) {
          Buf ye(2 * n), re(4 * T), me(8 * T);
          CK(cudaMemset(ye.p, 0xFF, 2 * n));
          CK(cudaMemset(re.p, 0xFF, 4 * T));
          CK(cudaMemset(me.p, 0xFF, 8 * T));
          auto go = [&](cudaStream_t st) {
            const bool ok = run_exp(st, static_cast<uint16_t*>(ye.p), static_cast<float*>(re.p),
                                    with_msq ? static_cast<double*>(me.p) : nullptr);
            CK(cudaGetLastError());
            return ok;
          };
          if (!go(nullptr)) return;
          nk::rmsnorm_fwd(fwd, fa);  // the forward's own outputs again (the timing loop above rewrote them)
          CK(cudaDeviceSynchronize());
          int64_t differ_ry = 0;  // of those, the rows whose rstd or y differs (msq alone follows the sum's order)
          const int64_t differ = rows_differ(fa.y, ye.p, 2 * static_cast<size_t>(n), fa.rstd, static_cast<float*>(re.p), fa.msq,
                                             static_cast<double*>(me.p), T, H, with_msq,
                                             [&](int64_t r) { return static_cast<size_t>(r * H); }, &differ_ry);
          time_row(wname,
                   label + " (" + std::to_string(differ) + " rows differ, " + std::to_string(differ_ry) +
                       " in rstd or y)",
                   fwd_bytes,
                   [&](nk::Stream st) { go(static_cast<cudaStream_t>(st)); });
        };
        if (fwd_exp && H % 8 == 0 && depth.fwd == depths.front().fwd) {
          experiment("fwd l2pass experiment", false, [&](cudaStream_t st, uint16_t* ye, float* re, double*) {
            if (wd == WDtype::bf16)
              fwdexp::launch_fwd_l2pass<__nv_bfloat16>(ib.x, w.p, ye, re, T, static_cast<int>(H), fa.eps, st);
            else
              fwdexp::launch_fwd_l2pass<float>(ib.x, w.p, ye, re, T, static_cast<int>(H), fa.eps, st);
            return true;
          });
        }
        for (const fwdrows::RowsSetting& R : fwd_rows) {
          if (H % 8 != 0 || depth.fwd != depths.front().fwd) break;
          const std::string tag = std::to_string(R.rows) + ":" + std::to_string(R.slots) + ":" +
                                  std::to_string(R.min_b) + ":" + std::to_string(R.f32) +
                                  (R.prew || R.hint ? ":" + std::to_string(R.prew) : std::string()) +
                                  (R.hint ? ":" + std::to_string(R.hint) : std::string());
          experiment("fwd rows " + tag + " experiment", true, [&](cudaStream_t st, uint16_t* ye, float* re, double* me) {
            return wd == WDtype::bf16
                       ? fwdrows::launch_fwd_rows<__nv_bfloat16>(R, ib.x, w.p, ye, re, me, T, static_cast<int>(H),
                                                                 fa.eps, st)
                       : fwdrows::launch_fwd_rows<float>(R, ib.x, w.p, ye, re, me, T, static_cast<int>(H), fa.eps, st);
          });
        }
        for (const fwdsmem::SmemSetting& S : fwd_smem) {
          if (H % 8 != 0 || depth.fwd != depths.front().fwd) break;
          experiment("fwd smem " + S.name() + " experiment", true, [&](cudaStream_t st, uint16_t* ye, float* re, double* me) {
            return wd == WDtype::bf16
                       ? fwdsmem::launch_fwd_smem<__nv_bfloat16>(S, ib.x, w.p, ye, re, me, T, static_cast<int>(H), fa.eps, st)
                       : fwdsmem::launch_fwd_smem<float>(S, ib.x, w.p, ye, re, me, T, static_cast<int>(H), fa.eps, st);
          });
        }
        for (const auto& ns : fwd_narrow) {
          if (H != 256 || depth.fwd != depths.front().fwd) break;
          experiment("fwd narrow " + ns.name() + " experiment", true,
                     [&, L = ns.L, R = ns.R, C = ns.C, K = ns.K](cudaStream_t st, uint16_t* ye, float* re, double* me) {
                       return wd == WDtype::bf16
                                  ? fwdnarrow::launch_fwd_narrow<__nv_bfloat16>(L, R, ib.x, 256, 0, w.p, ye, 256, 0, re,
                                                                               me, T, 1, fa.eps, st, C, K)
                                  : fwdnarrow::launch_fwd_narrow<float>(L, R, ib.x, 256, 0, w.p, ye, 256, 0, re, me, T,
                                                                        1, fa.eps, st, C, K);
                     });
        }

        for (const auto& v : nk::variants()) {
          if (v.op != nk::Op::bwd || (v.control && !controls) || v.model_only || !v.supports_h(H) ||
              !v.supports(normgate::Form::plain))  // bwd_det_heads: the per-head views only (timed below)
            continue;
          const size_t ws = nk::bwd_workspace_bytes(v, T, H);
          Buf work(ws);
          nk::BwdArgs ba;
          ba.dy = ib.dy;
          ba.dy_stride = H;
          ba.x = ib.x;
          ba.x_stride = H;
          ba.w = wv;
          ba.rstd = fa.rstd;
          ba.msq = fa.msq;
          ba.dx = static_cast<uint16_t*>(dx.p);
          ba.dx_stride = H;
          ba.dw = static_cast<float*>(dw.p);
          ba.T = T;
          ba.H = H;
          ba.workspace = work.p;
          ba.workspace_bytes = ws;
          const double bwd_bytes = 6.0 * n + wbytes + 12.0 * T + 4.0 * H;  // x, dy, rstd, msq read; dx, dw written
          time_row(wname, "bwd " + std::string(v.name) + (v.control ? " (control)" : "") + dtag, bwd_bytes,
                   [&](nk::Stream s) { nk::rmsnorm_bwd(v, ba, s, nk::ControlUse::allow); });
          if (res && !v.control) {  // form res: dh = dx + dh_new (dh_new = the plain forward's y, any BF16 data)
            nk::BwdArgs br = ba;
            br.form = normgate::Form::res;
            br.dh_new = static_cast<const uint16_t*>(y.p);
            br.dh_new_stride = H;
            const double rb_bytes = 8.0 * n + wbytes + 12.0 * T + 4.0 * H;  // dy, h_new, dh_new, rstd, msq read; dh written
            time_row(wname, "bwd res " + std::string(v.name) + dtag, rb_bytes,
                     [&](nk::Stream s) { nk::rmsnorm_bwd(v, br, s, nk::ControlUse::allow); });
          }
        }
      }  // depths

      // --combine-cols: the deterministic backward's second stage alone, the
      // library's (32 columns a CTA) beside bench/combine_cols.cuh's, on the
      // same [num_chunks(T, H), H] partials (any FP64 values: a fixed
      // pattern), once per shape; the dw columns that differ are counted.
      if (!combine_cols.empty() && wd == wds.front()) {
        const int64_t nc = nk::num_chunks(T, H);
        std::vector<double> hp(static_cast<size_t>(nc * H));
        for (size_t k = 0; k < hp.size(); ++k) hp[k] = std::ldexp(static_cast<double>((k * 2654435761u) % 1000003u) - 5e5, -20);
        Buf part(hp.size() * sizeof(double)), dref(static_cast<size_t>(H) * 4), dexp(static_cast<size_t>(H) * 4);
        CK(cudaMemcpy(part.p, hp.data(), hp.size() * sizeof(double), cudaMemcpyHostToDevice));
        nk::BwdArgs cb;
        cb.T = T;
        cb.H = H;
        cb.workspace = part.p;
        cb.dw = static_cast<float*>(dref.p);
        const double cbytes = 8.0 * static_cast<double>(nc * H) + 4.0 * H;  // the partials read, dw written
        time_row("-", "bwd stage 2 combine_partials (library, 32 columns a CTA, " + std::to_string(nc) + " partials)",
                 cbytes, [&](nk::Stream st) { nk::detail::enqueue_combine_partials(cb, st); });
        nk::detail::enqueue_combine_partials(cb, nullptr);
        std::vector<float> want(static_cast<size_t>(H)), got(static_cast<size_t>(H));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(want.data(), dref.p, want.size() * 4, cudaMemcpyDeviceToHost));
        for (const int c : combine_cols) {
          CK(cudaMemset(dexp.p, 0xFF, static_cast<size_t>(H) * 4));  // poisoned: NaN where nothing is written
          combinecols::launch_combine_cols(c, static_cast<const double*>(part.p), nc, H, static_cast<float*>(dexp.p),
                                           nullptr);
          CK(cudaGetLastError());
          CK(cudaDeviceSynchronize());
          CK(cudaMemcpy(got.data(), dexp.p, got.size() * 4, cudaMemcpyDeviceToHost));
          int64_t differ = 0;
          for (int64_t j = 0; j < H; ++j) differ += std::memcmp(&want[j], &got[j], 4) != 0;
          time_row("-", "bwd stage 2 combine " + std::to_string(c) + " columns a CTA experiment (" +
                            std::to_string(differ) + " columns differ)",
                   cbytes, [&, c](nk::Stream st) {
                     combinecols::launch_combine_cols(c, static_cast<const double*>(part.p), nc, H,
                                                      static_cast<float*>(dexp.p), st);
                   });
        }
      }

      // Per-head forms at H = 256 over the same T normalized rows (x and dy
      // copied from the plain buffers into buffers of the form's layout; y
      // and dx written in it): heads4 contiguous [T/4, 4, 256], heads24 the q
      // part of a packed qkv row ((24+8+8)*256 elements a token). Bytes: the
      // view's.
      if (heads && H == 256) {
        for (const int nh : {4, 24}) {
          const int64_t tok = T / nh, hrows = tok * nh, hn = hrows * 256;
          if (tok == 0) continue;
          const int64_t rowlen = nh == 24 ? (24 + 8 + 8) * 256 : 4 * 256;  // elements a token
          const size_t hbytes = static_cast<size_t>(tok * rowlen) * 2;
          Buf hx(hbytes), hdy(hbytes), hy(hbytes), hdx(hbytes), hrs(4 * hrows), hmsq(8 * hrows + 8);
          CK(cudaMemcpy2D(hx.p, rowlen * 2, ib.x, nh * 256 * 2, nh * 256 * 2, tok, cudaMemcpyDeviceToDevice));
          CK(cudaMemcpy2D(hdy.p, rowlen * 2, ib.dy, nh * 256 * 2, nh * 256 * 2, tok, cudaMemcpyDeviceToDevice));
          const normgate::Form form = nh == 4 ? normgate::Form::heads4 : normgate::Form::heads24;
          const std::string tag = nh == 4 ? "heads4 " : "heads24 ";
          nk::FwdArgs hf = fa;
          hf.form = form;
          hf.heads = nh;
          hf.x = static_cast<const uint16_t*>(hx.p);
          hf.y = static_cast<uint16_t*>(hy.p);
          hf.x_stride = hf.y_stride = rowlen;
          hf.x_stride_h = hf.y_stride_h = 256;
          hf.rstd = static_cast<float*>(hrs.p);
          hf.msq = static_cast<double*>(hmsq.p);
          hf.T = tok;
          const double hf_bytes = 4.0 * hn + wbytes + 12.0 * hrows;
          time_row(wname, "fwd " + tag + std::string(fwd.name), hf_bytes,
                   [&](nk::Stream s) { nk::rmsnorm_fwd(fwd, hf, s); });
          for (const auto& v : nk::variants())
            if (v.op == nk::Op::fwd && &v != &fwd && v.supports_h(H) && v.supports(form))
              time_row(wname, "fwd " + tag + std::string(v.name), hf_bytes,
                       [&](nk::Stream s) { nk::rmsnorm_fwd(v, hf, s); });
          // bench/fwd_narrow.cuh on the view, into its own buffers (poisoned),
          // compared row by row with the routed forward's y, rstd and msq.
          for (const auto& ns : fwd_narrow) {
            const int L = ns.L, R = ns.R, C = ns.C, K = ns.K;
            Buf ny(hbytes), nrs(4 * hrows), nmsq(8 * hrows + 8);
            CK(cudaMemset(ny.p, 0xFF, hbytes));
            CK(cudaMemset(nrs.p, 0xFF, 4 * hrows));
            CK(cudaMemset(nmsq.p, 0xFF, 8 * hrows));
            auto go = [&](cudaStream_t st) {
              const bool ok =
                  wd == WDtype::bf16
                      ? fwdnarrow::launch_fwd_narrow<__nv_bfloat16>(
                            L, R, hf.x, rowlen, 256, w.p, static_cast<uint16_t*>(ny.p), rowlen, 256,
                            static_cast<float*>(nrs.p), static_cast<double*>(nmsq.p), hrows, nh, fa.eps, st, C, K)
                      : fwdnarrow::launch_fwd_narrow<float>(L, R, hf.x, rowlen, 256, w.p, static_cast<uint16_t*>(ny.p),
                                                            rowlen, 256, static_cast<float*>(nrs.p),
                                                            static_cast<double*>(nmsq.p), hrows, nh, fa.eps, st, C, K);
              CK(cudaGetLastError());
              return ok;
            };
            if (!go(nullptr)) continue;
            nk::rmsnorm_fwd(fwd, hf);
            CK(cudaDeviceSynchronize());
            const int64_t differ = rows_differ(
                hy.p, ny.p, hbytes, static_cast<float*>(hrs.p), static_cast<float*>(nrs.p), static_cast<double*>(hmsq.p),
                static_cast<double*>(nmsq.p), hrows, 256, true,
                [&](int64_t r) { return static_cast<size_t>((r / nh) * rowlen + (r % nh) * 256); });
            time_row(wname,
                     "fwd " + tag + "narrow " + ns.name() + " experiment (" +
                         std::to_string(differ) + " rows differ)",
                     hf_bytes, [&](nk::Stream st) { go(static_cast<cudaStream_t>(st)); });
          }
          for (const auto& v : nk::variants()) {
            if (v.op != nk::Op::bwd || v.control || !v.supports_h(256) || !v.supports(form)) continue;
            const size_t ws = nk::bwd_workspace_bytes(v, hrows, 256);
            Buf work(ws);
            nk::BwdArgs hb;
            hb.form = form;
            hb.heads = nh;
            hb.dy = static_cast<const uint16_t*>(hdy.p);
            hb.x = hf.x;
            hb.dx = static_cast<uint16_t*>(hdx.p);
            hb.dy_stride = hb.x_stride = hb.dx_stride = rowlen;
            hb.dy_stride_h = hb.x_stride_h = hb.dx_stride_h = 256;
            hb.w = wv;
            hb.rstd = hf.rstd;
            hb.msq = hf.msq;
            hb.dw = static_cast<float*>(dw.p);
            hb.T = tok;
            hb.H = 256;
            hb.workspace = work.p;
            hb.workspace_bytes = ws;
            const double hb_bytes = 6.0 * hn + wbytes + 12.0 * hrows + 4.0 * 256;
            time_row(wname, "bwd " + tag + std::string(v.name), hb_bytes,
                     [&](nk::Stream s) { nk::rmsnorm_bwd(v, hb, s, nk::ControlUse::allow); });
          }
        }
      }
    }
  }

  if (!json.empty()) {
    std::ofstream f(json + ".tmp");
    f << "{\"gpu\": \"" << prop.name << "\", \"driver_api\": " << driver << ", \"runtime\": " << runtime
      << ", \"reps\": " << reps << ", \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i)
      f << "  {\"shape\": \"" << rows[i].shape << "\", \"w\": \"" << rows[i].w << "\", \"op\": \"" << rows[i].op
        << "\", \"median_us\": " << rows[i].median_us << ", \"min_us\": " << rows[i].min_us
        << ", \"GBps\": " << rows[i].gbps << ", \"frac_of_copy\": " << rows[i].frac_copy << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
    f << "]}\n";
    f.close();
    std::rename((json + ".tmp").c_str(), json.c_str());
  }
  std::printf("\n| shape | w | op | median us | min us | GB/s | of copy |\n| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : rows)
    std::printf("| %s | %s | %s | %.2f | %.2f | %.0f | %.3f |\n", r.shape.c_str(), r.w.c_str(), r.op.c_str(),
                r.median_us, r.min_us, r.gbps, r.frac_copy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kernels_bench: %s\n", e.what());
  return 1;
}
