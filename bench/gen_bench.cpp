// bench/gen_bench.cpp: what a case costs the GPU outside the kernels under
// test. For each case id it times (CUDA events, median of --reps):
//   gen       generate_device_inputs (x, dy, w; form res also u, dh_new) into
//             buffers of the runner's packed layout;
//   digest    run_gpu_digests of the case with the given backward (and the
//             routed forward's stand-in `--fwd`), everything included:
//             poison, generation, forward, backward, outside-view checks and
//             the digests;
//   digest_f  the same with forward outputs only (what `normgate digest`
//             runs for a forward window).
// Elements/s count the case's elements (rows x H) once per phase. Not a test:
// it never asserts a speed.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "normgate/harness/runner.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"

namespace nk = normgate::kernels;
namespace ns = normgate::seeds;

using normgate::bench_util::check;
using normgate::bench_util::median;

namespace {

// Host wall time of f() in ms, after a device synchronization on each side.
template <class F>
double wall_ms(F&& f) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto t0 = std::chrono::steady_clock::now();
  f();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gen_bench: device input generation and one digest run per case (median ms, elements/s)"};
  std::vector<std::string> cases;
  std::string bwd = "bwd_det_chunked", fwd = "fwd_rowwise";
  int reps = 5;
  app.add_option("cases", cases, "case ids, e.g. H=4096,T=65536,w=bf16,form=plain,family=llm,seed=1")->required();
  app.add_option("--bwd", bwd, "backward variant of the digest runs");
  app.add_option("--fwd", fwd, "forward variant of the digest runs");
  app.add_option("--reps", reps, "timed repetitions per phase (after one warm-up)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  std::vector<ns::CaseId> ids;
  try {
    for (const auto& s : cases) ids.push_back(ns::parse_case(s));
    (void)nk::variant(bwd);
    (void)nk::variant(fwd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gen_bench: %s\n", e.what());
    return 2;
  }
  try {
    const nk::Variant& vb = nk::variant(bwd);
    const nk::Variant& vf = nk::variant(fwd);
    const nk::ReuseGpuBuffers keep;  // the gate's and the digest's steady state: buffers kept between runs
    std::printf("%-56s %9s %9s %9s %9s %9s %9s\n", "case", "gen_ms", "gen_el/s", "dig_ms", "dig_el/s", "digf_ms",
                "digf_el/s");
    for (const ns::CaseId& c : ids) {
      const int64_t rows = c.rows(), cols = c.H;
      const size_t n = static_cast<size_t>(rows * cols);
      const bool res = c.form == normgate::Form::res;
      std::vector<void*> bufs;
      auto alloc = [&](size_t bytes) {
        void* p = nullptr;
        check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
        bufs.push_back(p);
        return p;
      };
      nk::DeviceInputBuffers b;
      b.x = static_cast<uint16_t*>(alloc(n * 2));
      b.x_stride = cols;
      b.dy = static_cast<uint16_t*>(alloc(n * 2));
      b.dy_stride = cols;
      b.w = alloc(static_cast<size_t>(cols) * 4);
      if (res) {
        b.u = static_cast<uint16_t*>(alloc(n * 2));
        b.u_stride = cols;
        b.dh_new = static_cast<uint16_t*>(alloc(n * 2));
        b.dh_new_stride = cols;
      }
      std::vector<double> gen, dig, digf;
      nk::GpuRunOptions opt;
      opt.fwd = &vf;
      nk::GpuRunOptions optf = opt;
      optf.forward_outputs_only = true;
      for (int k = 0; k <= reps; ++k) {
        const double g = wall_ms([&] { nk::generate_device_inputs(c, b, nullptr); });
        const double d = wall_ms([&] { (void)nk::run_gpu_digests(vb, c, static_cast<float>(c.eps), opt); });
        const double f = wall_ms([&] { (void)nk::run_gpu_digests(vb, c, static_cast<float>(c.eps), optf); });
        if (k == 0) continue;  // warm-up
        gen.push_back(g);
        dig.push_back(d);
        digf.push_back(f);
      }
      for (void* p : bufs) check(cudaFree(p), "cudaFree");
      const double mg = median(gen), md = median(dig), mf = median(digf);
      const double el = static_cast<double>(n);
      std::printf("%-56s %9.3f %9.3g %9.3f %9.3g %9.3f %9.3g\n", ns::to_string(c).c_str(), mg, el / mg * 1e3, md,
                  el / md * 1e3, mf, el / mf * 1e3);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gen_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
