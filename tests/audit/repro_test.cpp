// tests/audit/repro_test.cpp: repro.h: the k worst elements and the dw column explanation must agree with
// the validator (same worst element, same ratio), be ordered, and name the
// rows that really dominate a cancelling column.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "normgate/core/bf16.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/check.h"
#include "normgate/audit/case_file.h"
#include "normgate/audit/repro.h"
#include "normgate/harness/external.h"
#include "normgate/kernels/device.h"
#include "util/cpu_request.h"

namespace nv = normgate::validators;
namespace no = normgate::oracle;
using normgate::validators::testing::cpu_request;

namespace {
// The outputs a case file would record for req (repro with keep_case).
normgate::Outputs recorded_outputs(const nv::CheckRequest& req) {
  nv::ReproOptions keep;
  keep.k = 1;
  keep.keep_case = true;
  const auto r = nv::repro(req, keep);
  EXPECT_TRUE(r.saved.has_value());
  EXPECT_TRUE(r.vs_recorded.empty());  // nothing recorded for that run
  return r.saved ? r.saved->outputs : normgate::Outputs{};
}

// A replay's options: `rec` recorded by `impl` on the GPU.
nv::ReproOptions replay_of(const normgate::Outputs& rec, const char* impl) {
  nv::ReproOptions o;
  o.k = 2;
  o.recorded = &rec;
  o.recorded_impl = impl;
  o.recorded_backend = "gpu";
  return o;
}
}  // namespace

TEST(Repro, WorstElementsAgreeWithTheValidatorAndAreOrdered) {
  const auto c = normgate::seeds::parse_case("H=96,T=257,w=bf16,form=plain,family=llm,seed=4");
  const auto in = normgate::seeds::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  const auto ideal = no::Reference::compute(p, {0, no::RstdMode::fp32_rounded});
  auto got = no::fp32_baseline(p);
  got.dx[5000] ^= 0x0200;  // make one dx element clearly the worst
  const auto res = nv::validate_case(p, got, ref, ideal, nullptr, 2);
  for (nv::Output o : {nv::Output::y, nv::Output::rstd, nv::Output::dx, nv::Output::dw}) {
    const auto w = nv::worst_elements(p, got, ref, ideal, o, 7, 3);
    ASSERT_EQ(w.size(), 7u) << nv::to_string(o);
    EXPECT_EQ(w.front().index, res.get(o).worst.index) << nv::to_string(o);
    EXPECT_EQ(w.front().ratio, res.get(o).worst.ratio) << nv::to_string(o);
    EXPECT_EQ(w.front().forced, res.get(o).worst.forced) << nv::to_string(o);
    for (size_t i = 1; i < w.size(); ++i) EXPECT_GE(w[i - 1].ratio, w[i].ratio) << nv::to_string(o);
    for (const auto& e : w) EXPECT_NEAR(e.ratio, e.err / e.tol, 1e-12 * e.ratio) << nv::to_string(o);
  }
  EXPECT_EQ(nv::worst_elements(p, got, ref, ideal, nv::Output::dx, 1, 1).front().index, 5000);
  // Thread count does not change the answer.
  const auto a = nv::worst_elements(p, got, ref, ideal, nv::Output::y, 20, 1);
  const auto b = nv::worst_elements(p, got, ref, ideal, nv::Output::y, 20, 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].index, b[i].index);
  EXPECT_THROW(nv::worst_elements(p, got, ref, ideal, nv::Output::dx, 0), std::invalid_argument);
  EXPECT_THROW(nv::worst_elements(p, got, ref, ideal, nv::Output::h_new, 3), std::invalid_argument);
}

TEST(Repro, DwColumnConditioningAndTopRows) {
  const auto c = normgate::seeds::parse_case("H=32,T=300,w=fp32,form=plain,family=cancel,seed=1");
  const auto in = normgate::seeds::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  const auto col = nv::dw_column(p, ref, 7, 4);
  EXPECT_EQ(col.col, 7);
  EXPECT_DOUBLE_EQ(col.condition, ref.dw_abs(7) / std::fabs(ref.dw(7).v));
  EXPECT_GT(col.condition, 1e6);  // cancel: kappa 1e8 by construction
  ASSERT_EQ(col.top_rows.size(), 4u);
  // The listed rows are the largest |dy*x*rstd| of the column, recomputed here.
  double kth = std::fabs(col.top_rows.back().term), maxabs = 0;
  for (int64_t r = 0; r < p.x.rows(); ++r) {
    const double t = static_cast<double>(normgate::bf16_to_float(p.dy.row(r)[7])) *
                     static_cast<double>(normgate::bf16_to_float(p.x.row(r)[7])) * ref.rstd(r).v;
    maxabs = std::max(maxabs, std::fabs(t));
    bool listed = false;
    for (const auto& row : col.top_rows) listed = listed || row.row == r;
    if (!listed) {
      EXPECT_LE(std::fabs(t), kth) << r;
    }
  }
  EXPECT_EQ(std::fabs(col.top_rows.front().term), maxabs);
  EXPECT_THROW(nv::dw_column(p, ref, 32, 1), std::invalid_argument);
}

TEST(Repro, ReportNamesTheCaseAndACommand) {
  nv::CheckRequest req = cpu_request("H=64,T=600,w=bf16,form=plain,family=cancel,seed=1", "ctl_fp32_seq");
  const auto r = nv::repro(req, 3);
  EXPECT_FALSE(r.check.pass());  // the control fails cancel
  ASSERT_EQ(r.worst.size(), 4u);
  EXPECT_GT(r.worst[3].front().ratio, 1.0);
  ASSERT_EQ(r.dw_columns.size(), 3u);
  EXPECT_EQ(r.dw_columns[0].col, r.worst[3].front().index);
  const std::string text = nv::format_repro(r);
  EXPECT_NE(text.find("reproduce: normgate repro 'H=64,T=600,w=bf16,form=plain,family=cancel,seed=1' --variant "
                      "ctl_fp32_seq --backend cpu --oracle auto --k 3"),
            std::string::npos);
  req.impls = {"ctl_fp32_seq", "bwd_det_chunked"};
  EXPECT_THROW(nv::repro(req, 3), std::invalid_argument);
}

// A case file names the CUDA device an external declares it computes on
// (ExternalImpl::cuda_device: a device plugin, a Python callable on cuda),
// as it does a GPU run's; one on the host leaves gpu, driver and cuda empty.
// Before, every external's were empty. The device half needs a GPU.
TEST(Repro, AnExternalsCaseFileNamesItsDevice) {
  auto saved_prov = [](int cuda_device) {
    nv::ExternalImpl x;
    x.name = "ext_prov_dev";
    x.op = normgate::kernels::Op::fwd;
    x.mode = normgate::kernels::Mode::det;
    x.source_sha256 = std::string(64, 'd');
    x.origin = "test";
    x.ran_on = cuda_device >= 0 ? "test callback on cuda:0" : "test callback on cpu";
    x.cuda_device = cuda_device;
    x.run = [](const normgate::seeds::HostInputs& in, normgate::Outputs& out) {
      std::copy(in.x.begin(), in.x.end(), out.y.begin());
      std::fill(out.rstd.begin(), out.rstd.end(), 1.0f);
    };
    nv::register_external(x);
    nv::ReproOptions keep;
    keep.k = 1;
    keep.keep_case = true;
    const auto r = nv::repro(cpu_request("H=32,T=5,w=bf16,form=plain,family=normal,seed=0", "ext_prov_dev"), keep);
    EXPECT_TRUE(r.saved.has_value());
    return r.saved ? r.saved->prov : nv::Provenance{};
  };
  const nv::Provenance host = saved_prov(-1);
  EXPECT_EQ(host.backend, "test callback on cpu");
  EXPECT_EQ(host.gpu, "");
  EXPECT_EQ(host.driver, "");
  EXPECT_EQ(host.cuda, "");
  {  // a device index below -1 is refused by name
    nv::ExternalImpl bad;
    bad.name = "ext_prov_bad";
    bad.op = normgate::kernels::Op::fwd;
    bad.source_sha256 = std::string(64, 'd');
    bad.origin = "test";
    bad.ran_on = "x";
    bad.cuda_device = -2;
    bad.run = [](const normgate::seeds::HostInputs&, normgate::Outputs&) {};
    try {
      nv::register_external(bad);
      ADD_FAILURE() << "cuda_device -2 registered";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("cuda_device = -2 (a CUDA device index >= 0, or -1 for the host)"),
                std::string::npos)
          << e.what();
    }
  }
  if (!normgate::kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device: the device half needs one";
  const nv::Provenance dev = saved_prov(0);
  const auto d = normgate::kernels::device_info(0);
  EXPECT_EQ(dev.backend, "test callback on cuda:0");
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(dev.gpu, d.name);
  EXPECT_EQ(dev.driver, d.driver);
  EXPECT_EQ(dev.cuda, d.cuda_runtime);
}

// A replay compares this run's outputs with the recorded ones bit for bit:
// a recording of the same CPU model is identical; one flipped dx bit, a
// changed dw and a NaN rstd are each counted with their output; a recording
// of another implementation is not compared; a size mismatch throws.
TEST(Repro, ReplayComparesWithTheRecordedOutputsBitForBit) {
  const nv::CheckRequest req = cpu_request("H=48,T=37,w=bf16,form=plain,family=llm,seed=3", "bwd_det_chunked");
  normgate::Outputs rec = recorded_outputs(req);
  nv::ReproOptions again = replay_of(rec, "bwd_det_chunked");
  auto r = nv::repro(req, again);
  ASSERT_EQ(r.vs_recorded.size(), 4u);
  for (const auto& d : r.vs_recorded) {
    EXPECT_EQ(d.differ, 0) << d.output;
    EXPECT_EQ(d.max_abs, 0.0) << d.output;
  }
  EXPECT_EQ(r.vs_recorded[2].elements, 37 * 48);
  EXPECT_NE(nv::format_repro(r).find("recorded outputs (recorded by bwd_det_chunked on gpu): identical bit for bit "
                                     "(y, rstd, dx, dw)"),
            std::string::npos);
  const float dx0 = normgate::bf16_to_float(rec.dx[100]);
  rec.dx[100] ^= 0x0001;  // one ulp of one dx element
  rec.dw[7] = std::nextafter(rec.dw[7], 1e30f);
  rec.rstd[3] = std::nanf("");
  r = nv::repro(req, again);
  EXPECT_EQ(r.vs_recorded[0].differ, 0);  // y
  EXPECT_EQ(r.vs_recorded[1].differ, 1);  // rstd: the NaN
  EXPECT_EQ(r.vs_recorded[1].max_abs, std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.vs_recorded[2].differ, 1);
  EXPECT_EQ(r.vs_recorded[2].max_abs, std::fabs(static_cast<double>(normgate::bf16_to_float(rec.dx[100])) - dx0));
  EXPECT_GT(r.vs_recorded[2].max_abs, 0.0);
  EXPECT_EQ(r.vs_recorded[3].differ, 1);
  const std::string text = nv::format_repro(r);
  EXPECT_NE(text.find("DIFFER: rstd 1 of 37 elements differ (max |diff| inf); dx 1 of 1776 elements differ"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("; identical: y"), std::string::npos) << text;
  again.recorded_impl = "ctl_fp32_seq";
  r = nv::repro(req, again);
  EXPECT_TRUE(r.vs_recorded.empty());
  EXPECT_NE(nv::format_repro(r).find("not compared (this run is bwd_det_chunked)"), std::string::npos);
  again.recorded_impl = "bwd_det_chunked";
  rec.dw.pop_back();
  EXPECT_THROW(nv::repro(req, again), std::runtime_error);
}

// Form res: h_new is compared too (one flipped bit counted); a recording
// without h_new against a run with one is a size mismatch. A
// non-deterministic variant's dw may differ (not a mismatch); its dx may not.
TEST(Repro, ReplayComparesHNewAndToleratesOnlyNondetDw) {
  const nv::CheckRequest res = cpu_request("H=24,T=18,w=fp32,form=res,family=llm,seed=5", "bwd_det_chunked");
  normgate::Outputs rec = recorded_outputs(res);
  ASSERT_EQ(rec.h_new.size(), 18u * 24u);
  auto r = nv::repro(res, replay_of(rec, "bwd_det_chunked"));
  ASSERT_EQ(r.vs_recorded.size(), 5u);
  EXPECT_EQ(r.vs_recorded[4].output, "h_new");
  EXPECT_FALSE(r.recorded_mismatch());
  EXPECT_NE(nv::format_repro(r).find("identical bit for bit (y, rstd, dx, dw, h_new)"), std::string::npos);
  rec.h_new[17] ^= 0x0001;
  r = nv::repro(res, replay_of(rec, "bwd_det_chunked"));
  EXPECT_EQ(r.vs_recorded[4].differ, 1);
  EXPECT_TRUE(r.recorded_mismatch());
  rec.h_new.clear();
  EXPECT_THROW(nv::repro(res, replay_of(rec, "bwd_det_chunked")), std::runtime_error);

  const nv::CheckRequest nd = cpu_request("H=40,T=21,w=bf16,form=plain,family=normal,seed=2", "bwd_nondet_atomic");
  normgate::Outputs nrec = recorded_outputs(nd);
  const nv::ReproOptions again = replay_of(nrec, "bwd_nondet_atomic");
  nrec.dw[3] = std::nextafter(nrec.dw[3], 1e30f);
  r = nv::repro(nd, again);
  EXPECT_TRUE(r.vs_recorded[3].may_differ);
  EXPECT_EQ(r.vs_recorded[3].differ, 1);
  EXPECT_FALSE(r.recorded_mismatch());
  EXPECT_NE(nv::format_repro(r).find("identical bit for bit (y, rstd, dx); dw 1 of 40 elements differ"),
            std::string::npos)
      << nv::format_repro(r);
  nrec.dx[0] ^= 0x0001;
  r = nv::repro(nd, again);
  EXPECT_FALSE(r.vs_recorded[2].may_differ);
  EXPECT_TRUE(r.recorded_mismatch());
}

// The pooled y/dx maps are the max of the full map over each tile, whichever
// way the work is split: tile rows owned by threads (many tile rows) or
// per-thread maps merged (few, wide tiles), at 1 and 3 threads; the
// histograms do not depend on it either. (Per-thread maps of every tile
// made a small tile cost 8 bytes an element a thread, and their allocation
// inside the parallel region ended the process on std::bad_alloc.)
TEST(ErrorMaps, PooledMapsAreTheFullMapsMaxWhateverTheSplit) {
  const auto c = normgate::seeds::parse_case("H=40,T=37,w=bf16,form=plain,family=llm,seed=2");
  const auto in = normgate::seeds::generate_host(c);
  const no::Problem p{in.x_view(), in.dy_view(), in.w_view(), c.eps};
  const auto ref = no::Reference::compute(p, {0, no::RstdMode::fp64});
  auto got = no::fp32_baseline(p);
  got.dx[333] ^= 0x0100;  // one clearly worse dx element
  const auto full = nv::error_maps(p, got, ref, 1, true, 1);  // tile 1: 37 tile rows
  ASSERT_EQ(full.dx_full.size(), static_cast<size_t>(37 * 40));
  EXPECT_EQ(full.dx_tiles, full.dx_full);  // tile 1: each tile is one element
  for (const int64_t tile : {1, 3, 16, 64}) {
    for (const int threads : {1, 3}) {
      const auto m = nv::error_maps(p, got, ref, tile, false, threads);
      ASSERT_EQ(m.tile_rows, (37 + tile - 1) / tile);
      ASSERT_EQ(m.tile_cols, (40 + tile - 1) / tile);
      std::vector<float> want(static_cast<size_t>(m.tile_rows * m.tile_cols), 0.0f);
      for (int64_t r = 0; r < 37; ++r)
        for (int64_t j = 0; j < 40; ++j) {
          float& t = want[static_cast<size_t>((r / tile) * m.tile_cols + j / tile)];
          t = std::max(t, full.dx_full[static_cast<size_t>(r * 40 + j)]);
        }
      EXPECT_EQ(m.dx_tiles, want) << "tile " << tile << ", threads " << threads;
      EXPECT_EQ(m.hist[0], full.hist[0]) << "tile " << tile << ", threads " << threads;
      EXPECT_EQ(m.hist[2], full.hist[2]) << "tile " << tile << ", threads " << threads;
      if (tile == 1) EXPECT_EQ(m.y_tiles, full.y_tiles) << threads;
    }
  }
}
