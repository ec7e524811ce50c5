// bench/add_row_bench.cpp: RatioStats::add_row alone, the AVX-512 block scan
// against the four-lane clones (validators::set_block_scan), on one case's y
// and dx rows as validate_cases feeds them.
//
// Usage: add_row_bench CASE_ID [variant=bwd_det_chunked] [rows=2] [samples=30]
//   e.g. add_row_bench H=4096,T=16384,w=bf16,form=plain,family=llm,seed=1
// Inputs from the host generator, the variant's outputs from its CPU model;
// `rows` rows spread over the tensor are put into arrays once (got widened
// from BF16, the reference's values and bounds, the ideal rounded to BF16:
// 8 arrays of rows * H doubles, each on a cache line as validate_cases'
// tiles, in L2 at the default 2 rows of H = 4096).
// One pass is add_row on y then dx, tile by tile (256 columns, as
// validate_cases); each implementation's summaries are first filled with one
// untimed pass, so the timed passes see settled maxima as a long sweep does.
// A sample is 20 passes; the two implementations alternate sample by sample.
// Prints each one's minimum per element and whether their summaries are
// identical (every field, bit for bit). One thread; asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/validators/stats.h"
#include "cli_args.h"

namespace {

namespace nv = normgate::validators;
using clk = std::chrono::steady_clock;

// n doubles starting on a cache line, as validate_cases' tile buffers.
struct Aligned {
  std::vector<double> buf;
  double* p = nullptr;
  void resize(size_t n) {
    buf.assign(n + 8, 0.0);
    const uintptr_t a = reinterpret_cast<uintptr_t>(buf.data());
    p = buf.data() + ((64 - a % 64) % 64) / sizeof(double);
  }
  double* data() { return p; }
  double& operator[](size_t i) { return p[i]; }
};

struct Rows {  // one output's tiles, row after row
  Aligned g, v, bd, ideal;
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same(const nv::RatioStats& a, const nv::RatioStats& b) {
  bool s = a.n == b.n && a.over == b.over && a.nonfinite_fail == b.nonfinite_fail &&
           same_bits(a.max_forced, b.max_forced) && same_bits(a.max_bound_ratio, b.max_bound_ratio) &&
           a.uncertified == b.uncertified && a.over_certified == b.over_certified && a.worst.index == b.worst.index &&
           same_bits(a.worst.ratio, b.worst.ratio) && a.uncertain.index == b.uncertain.index &&
           same_bits(a.uncertain.ratio, b.uncertain.ratio);
  for (int k = 0; k < nv::Histogram::kBins; ++k) s = s && a.hist.count[k] == b.hist.count[k];
  return s;
}

namespace cli = normgate::bench_cli;

constexpr const char* kUsage =
    "usage: add_row_bench CASE_ID [variant=bwd_det_chunked] [rows=2] [samples=30]\n"
    "  e.g. add_row_bench H=4096,T=16384,w=bf16,form=plain,family=llm,seed=1\n"
    "  rows >= 1; samples >= 1\n";

int bench(const cli::Args& a) {
  namespace no = normgate::oracle;
  const normgate::seeds::CaseId id =
      cli::as_usage("CASE_ID", [&] { return normgate::seeds::parse_case(a.required(1, "CASE_ID")); });
  const std::string variant = a.has(2) ? a.at(2) : "bwd_det_chunked";
  cli::as_usage("variant", [&] { return &normgate::kernels::variant(variant); });
  const int64_t want_rows = cli::int_arg<int64_t>(a, 3, "rows", 2, 1);
  const int samples = cli::int_arg(a, 4, "samples", 30, 1);
  constexpr int kPasses = 20;
  constexpr int64_t kTile = 256;

  const normgate::seeds::HostInputs in = normgate::seeds::generate_host(id, 1);
  const bool res = id.form == normgate::Form::res;
  const nv::CaseOracle co(in, no::OracleMode::auto_, 1, false);
  const no::Problem& p = co.problem;
  const normgate::RowView<uint16_t> u =
      res ? normgate::RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : normgate::RowView<uint16_t>{};
  const normgate::Outputs got = normgate::kernels::run_model(normgate::kernels::variant(variant), in.x_view(), p.dy,
                                                             p.w, static_cast<float>(id.eps), 1, u, p.dx_add);
  const int64_t rows_all = p.x.rows(), cols = p.x.cols;
  const int64_t rows = std::min(want_rows, rows_all);
  Rows y, dx;
  for (Rows* t : {&y, &dx})
    for (Aligned* a : {&t->g, &t->v, &t->bd, &t->ideal}) a->resize(static_cast<size_t>(rows * cols));
  std::vector<double> iv(static_cast<size_t>(cols));
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t r = k * rows_all / rows;
    const size_t at = static_cast<size_t>(k * cols);
    co.ref.y_row(r, 0, cols, y.v.data() + at, y.bd.data() + at);
    nv::round_to_bf16_row(y.v.data() + at, cols, y.ideal.data() + at);
    co.ref.dx_row(r, 0, cols, dx.v.data() + at, dx.bd.data() + at);
    co.ideal.dx_row_values(r, 0, cols, iv.data());
    nv::round_to_bf16_row(iv.data(), cols, dx.ideal.data() + at);
    for (int64_t j = 0; j < cols; ++j) {
      y.g[at + static_cast<size_t>(j)] = normgate::bf16_to_float(got.y[static_cast<size_t>(r * cols + j)]);
      dx.g[at + static_cast<size_t>(j)] = normgate::bf16_to_float(got.dx[static_cast<size_t>(r * cols + j)]);
    }
  }
  auto pass = [&](nv::RatioStats& sy, nv::RatioStats& sd) {
    for (int64_t k = 0; k < rows; ++k)
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const size_t at = static_cast<size_t>(k * cols + j0);
        const int64_t n = std::min(kTile, cols - j0);
        const int64_t base = (k * rows_all / rows) * cols + j0;
        sy.add_row(base, y.g.data() + at, y.v.data() + at, y.bd.data() + at, y.ideal.data() + at, n);
        sd.add_row(base, dx.g.data() + at, dx.v.data() + at, dx.bd.data() + at, dx.ideal.data() + at, n);
      }
  };
  const nv::BlockScanImpl impls[2] = {nv::BlockScanImpl::best, nv::BlockScanImpl::clones};
  nv::RatioStats sy[2] = {nv::RatioStats(nv::Output::y), nv::RatioStats(nv::Output::y)};
  nv::RatioStats sd[2] = {nv::RatioStats(nv::Output::dx), nv::RatioStats(nv::Output::dx)};
  double best[2] = {1e30, 1e30};
  for (int i = 0; i < 2; ++i) {
    nv::set_block_scan(impls[i]);
    pass(sy[i], sd[i]);
  }
  for (int s = 0; s < samples; ++s)
    for (int i = 0; i < 2; ++i) {
      nv::set_block_scan(impls[i]);
      const auto t0 = clk::now();
      for (int k = 0; k < kPasses; ++k) pass(sy[i], sd[i]);
      best[i] = std::min(best[i], std::chrono::duration<double>(clk::now() - t0).count());
    }
  nv::set_block_scan(nv::BlockScanImpl::best);
  const double elements = 2.0 * kPasses * static_cast<double>(rows * cols);
  std::printf("add_row_bench %s, %s, %lld rows of %lld, y and dx, min of %d samples of %d passes\n",
              normgate::seeds::to_string(id).c_str(), variant.c_str(), static_cast<long long>(rows),
              static_cast<long long>(cols), samples, kPasses);
  std::printf("ns per element: best (%s) %.3f, clones %.3f; summaries %s\n",
              nv::block_scan_avx512() ? "AVX-512 scan" : "= clones", 1e9 * best[0] / elements,
              1e9 * best[1] / elements, same(sy[0], sy[1]) && same(sd[0], sd[1]) ? "identical" : "DIFFER");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return cli::run_main("add_row_bench", kUsage, argc, argv, 4, bench); }
