// tests/harness/devices_stats_test.cpp: the device list of a check pipeline
// (harness/devices.h parse_devices) and its per-phase throughput
// (pipeline.h PipelineStats, measure_host_copy, to_json of the stats); on a
// GPU, run_checks over a device list that repeats device 0 gives the reports
// of one worker, and so does run_checks without overlap (NORMGATE_OVERLAP=0,
// pipeline_overlap), one case in flight at a time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/harness/devices.h"
#include "normgate/harness/pipeline.h"
#include "normgate/kernels/device.h"
#include "normgate/seeds/case_id.h"

namespace {

using namespace normgate;
namespace nv = normgate::validators;

std::string parse_error(const std::string& text, int count) {
  try {
    (void)kernels::parse_devices(text, count);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Devices, ParsesAllAndLists) {
  EXPECT_EQ(kernels::parse_devices("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(kernels::parse_devices("all", 1), (std::vector<int>{0}));
  EXPECT_TRUE(kernels::parse_devices("all", 0).empty());
  EXPECT_EQ(kernels::parse_devices("3,1,2,0", 4), (std::vector<int>{3, 1, 2, 0}));  // order kept
  EXPECT_EQ(kernels::parse_devices("0,0,0", 1), (std::vector<int>{0, 0, 0}));       // repeats: workers
  EXPECT_EQ(kernels::parse_devices("1", 2), (std::vector<int>{1}));
  EXPECT_EQ(kernels::to_string({0, 0, 2}), "0,0,2");
  EXPECT_EQ(kernels::parse_devices(kernels::to_string({2, 0, 2}), 3), (std::vector<int>{2, 0, 2}));
}

TEST(Devices, BadListsNameTheValue) {
  // An index past the visible devices names it and the count.
  std::string e = parse_error("0,4", 4);
  EXPECT_TRUE(has(e, "device 4 does not exist") && has(e, "4 visible CUDA devices") && has(e, "'0,4'")) << e;
  e = parse_error("0", 0);
  EXPECT_TRUE(has(e, "device 0 does not exist") && has(e, "0 visible CUDA devices")) << e;
  e = parse_error("1", 1);
  EXPECT_TRUE(has(e, "device 1 does not exist") && has(e, "1 visible CUDA device:")) << e;
  EXPECT_TRUE(has(parse_error("-1", 4), "device -1 is negative"));
  for (const char* bad : {"x", "0,x", "1.5", "+1", " 1", "1 ", "0x1", "all,0", "99999999999"}) {
    const std::string m = parse_error(bad, 4);
    EXPECT_TRUE(has(m, "is not a device index") && has(m, std::string("'") + bad + "'")) << bad << ": " << m;
  }
  for (const char* bad : {"", "0,", ",0", "0,,1"}) {
    const std::string m = parse_error(bad, 4);
    EXPECT_TRUE(has(m, "empty")) << "'" << bad << "': " << m;
  }
}

// A CPU-backend pipeline over a plain and a head-form case: elements are
// rows*H per case (heads4: T*4 rows of 256), every phase that ran has time,
// the done callback's time is the journal phase, and a case that throws
// counts in neither.
TEST(PipelineStats, PhasesAndElementsOfACpuRun) {
  const std::vector<std::string> ids = {"H=64,T=300,w=bf16,form=plain,family=normal,seed=1",
                                        "H=64,T=7,w=bf16,form=plain,family=normal,seed=2",  // made to throw
                                        "H=256,T=50,w=fp32,form=heads4,family=cancel,seed=1"};
  std::vector<nv::CheckRequest> reqs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    reqs[i].id = seeds::parse_case(ids[i]);
    reqs[i].impls = {"bwd_det_chunked", "fp32-baseline"};
    reqs[i].backend = nv::Backend::cpu;
    reqs[i].threads = 1;
  }
  reqs[1].impls = {"bwd_no_such_variant"};
  constexpr auto kNap = std::chrono::milliseconds(20);
  const nv::PipelineStats st = nv::run_checks(
      ids.size(), [&](size_t i) { return reqs[i]; },
      [&](size_t, nv::CheckReport*, std::exception_ptr) { std::this_thread::sleep_for(kNap); },
      {7, 7});  // ignored on the CPU backend
  EXPECT_EQ(st.cases, 3);
  EXPECT_TRUE(st.devices.empty());
  EXPECT_EQ(st.elements, 300 * 64 + 50 * 4 * 256);  // the failed case not counted
  EXPECT_GT(st.phases.generation, 0.0);
  EXPECT_GT(st.phases.kernels, 0.0);  // the CPU models
  EXPECT_EQ(st.phases.downloads, 0.0);
  EXPECT_GT(st.phases.reference, 0.0);
  EXPECT_GT(st.phases.validation, 0.0);
  EXPECT_GE(st.phases.journal, 2 * 0.02);  // two cases with a report, 20 ms each in done()
  EXPECT_LT(st.phases.journal, st.seconds_total);
  // Sequential on the CPU: the phases of the cases with a report fit in the run.
  const auto& p = st.phases;
  EXPECT_LE(p.generation + p.kernels + p.reference + p.validation + p.journal, st.seconds_total);

  nv::PipelineStats sum;
  sum += st;
  sum += st;
  EXPECT_EQ(sum.elements, 2 * st.elements);
  EXPECT_EQ(sum.cases, 6);
  EXPECT_DOUBLE_EQ(sum.phases.reference, 2 * st.phases.reference);
  EXPECT_DOUBLE_EQ(sum.seconds_total, 2 * st.seconds_total);
}

// A device past the visible ones is refused before any case runs (here
// without a GPU too: device 0 of none).
TEST(RunChecksDevices, MissingDeviceRefusedBeforeAnyWork) {
  nv::CheckRequest req;
  req.id = seeds::parse_case("H=64,T=10,w=bf16,form=plain,family=normal,seed=0");
  req.impls = {"bwd_det_chunked"};
  req.backend = nv::Backend::gpu;
  int calls = 0;
  const int missing = kernels::device_count();
  try {
    (void)nv::run_checks(
        2, [&](size_t) { return req; }, [&](size_t, nv::CheckReport*, std::exception_ptr) { ++calls; },
        {0, missing});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(has(e.what(), "device " + std::to_string(missing) + " does not exist")) << e.what();
  }
  EXPECT_EQ(calls, 0);
}

TEST(PipelineStats, HostCopyBandwidth) {
  EXPECT_THROW((void)nv::measure_host_copy(0, 3), std::invalid_argument);
  EXPECT_THROW((void)nv::measure_host_copy(1 << 20, 0), std::invalid_argument);
  const nv::HostCopyBandwidth c = nv::measure_host_copy(size_t{32} << 20, 2, 2);
  EXPECT_EQ(c.bytes, size_t{32} << 20);
  EXPECT_EQ(c.repetitions, 2);
  EXPECT_EQ(c.threads, 2);
  EXPECT_GT(c.best_seconds, 0.0);
  EXPECT_DOUBLE_EQ(c.bytes_per_second, static_cast<double>(c.bytes) / c.best_seconds);
  EXPECT_GT(c.bytes_per_second, 1e8);  // any machine copies more than 100 MB/s
}

TEST(PipelineStats, JsonHasEveryPhaseRateAndTheCopyFraction) {
  nv::PipelineStats st;
  st.cases = 4;
  st.elements = 1'000'000;
  st.devices = {0, 0};
  st.seconds_total = 2.0;
  st.phases.generation = 0.5;
  st.phases.kernels = 0.25;
  st.phases.reference = 1.0;
  st.phases.validation = 0.4;
  st.phases.journal = 0.1;  // downloads: 0 (not run)
  nv::HostCopyBandwidth copy;
  copy.bytes = 1 << 26;
  copy.repetitions = 3;
  copy.threads = 2;
  copy.best_seconds = 0.01;
  copy.bytes_per_second = 4e9;
  const nlohmann::json j = nv::to_json(st, copy);
  EXPECT_EQ(j.at("format"), nv::kPipelineStatsFormat);
  EXPECT_EQ(j.at("cases"), 4);
  EXPECT_EQ(j.at("elements"), 1'000'000);
  EXPECT_EQ(j.at("devices"), (std::vector<int>{0, 0}));
  EXPECT_DOUBLE_EQ(j.at("phases").at("generation").at("elements_per_second").get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(j.at("phases").at("kernels").at("elements_per_second").get<double>(), 4e6);
  EXPECT_TRUE(j.at("phases").at("downloads").at("elements_per_second").is_null());
  EXPECT_DOUBLE_EQ(j.at("phases").at("reference").at("elements_per_second").get<double>(), 1e6);
  EXPECT_DOUBLE_EQ(j.at("phases").at("validation").at("elements_per_second").get<double>(), 2.5e6);
  EXPECT_DOUBLE_EQ(j.at("phases").at("journal").at("elements_per_second").get<double>(), 1e7);
  EXPECT_DOUBLE_EQ(j.at("end_to_end").at("elements_per_second").get<double>(), 5e5);
  EXPECT_EQ(j.at("bytes_per_element"), nv::kBytesPerElement);
  // 5e5 elements/s x 8 B = 4e6 B/s of 4e9 B/s.
  EXPECT_DOUBLE_EQ(j.at("end_to_end_fraction_of_host_copy").get<double>(), 1e-3);
  EXPECT_EQ(j.at("host_copy").at("bytes"), 1 << 26);
  const std::string text = nv::format_pipeline_stats(st, copy);
  for (const char* part : {"generation", "kernels", "downloads", "reference", "validation", "journal",
                           "end to end", "5e+05 elements/s", "0.1% of the host copy bandwidth 4 GB/s",
                           "devices 0,0"})
    EXPECT_TRUE(has(text, part)) << part << "\n" << text;
  // Nothing checked (a resumed run with nothing left): no "0 elements/s",
  // no "0.0% of the host copy bandwidth".
  nv::PipelineStats none;
  none.seconds_total = 0.01;
  const std::string empty = nv::format_pipeline_stats(none, copy);
  EXPECT_TRUE(has(empty, "no case checked")) << empty;
  EXPECT_FALSE(has(empty, "elements/s")) << empty;
  EXPECT_FALSE(has(empty, "host copy bandwidth")) << empty;
}

// GPU only: the same cases over devices "0" and "0,0,0" (three workers on
// one GPU, cases finished in order) give identical reports; the stats name
// the workers' devices and count the downloads.
// NORMGATE_OVERLAP (pipeline.h pipeline_overlap): "0" off; unset, empty,
// "1" and anything else on. The variable is restored however the test ends.
struct OverlapEnv {
  std::optional<std::string> saved;
  OverlapEnv() {
    if (const char* e = std::getenv("NORMGATE_OVERLAP")) saved = e;
  }
  ~OverlapEnv() {
    if (saved) setenv("NORMGATE_OVERLAP", saved->c_str(), 1);
    else unsetenv("NORMGATE_OVERLAP");
  }
  void set(const char* v) {
    if (v) setenv("NORMGATE_OVERLAP", v, 1);
    else unsetenv("NORMGATE_OVERLAP");
  }
};

TEST(PipelineOverlap, ReadsNormgateOverlap) {
  OverlapEnv env;
  env.set(nullptr);
  EXPECT_TRUE(nv::pipeline_overlap());
  env.set("");
  EXPECT_TRUE(nv::pipeline_overlap());
  env.set("1");
  EXPECT_TRUE(nv::pipeline_overlap());
  env.set("0");
  EXPECT_FALSE(nv::pipeline_overlap());
  env.set("off");  // not a value it knows: said once, the default kept
  EXPECT_TRUE(nv::pipeline_overlap());
  env.set("00");
  EXPECT_TRUE(nv::pipeline_overlap());
}

// The cases run_checks holds in host memory at once, which the gate's
// host-memory check multiplies its largest case by: the one being finished
// and one prepared ahead a GPU worker; one without overlap or on the CPU.
TEST(PipelineOverlap, CasesInHostMemory) {
  OverlapEnv env;
  env.set(nullptr);
  EXPECT_EQ(nv::cases_in_host_memory(true, 1), 2u);
  EXPECT_EQ(nv::cases_in_host_memory(true, 3), 4u);
  EXPECT_EQ(nv::cases_in_host_memory(true, 0), 2u);  // no list: at least one worker
  EXPECT_EQ(nv::cases_in_host_memory(false, 3), 1u);
  env.set("0");
  EXPECT_EQ(nv::cases_in_host_memory(true, 3), 1u);
  EXPECT_EQ(nv::kPinnedStagingBytes, uint64_t{134217728});
}

// The CPU backend never overlaps, whatever NORMGATE_OVERLAP says.
TEST(PipelineOverlap, CpuBackendNeverOverlaps) {
  OverlapEnv env;
  for (const char* v : {"1", "0"}) {
    env.set(v);
    nv::CheckRequest r;
    r.id = seeds::parse_case("H=64,T=9,w=bf16,form=plain,family=llm,seed=1");
    r.impls = {"bwd_det_chunked"};
    r.backend = nv::Backend::cpu;
    const nv::PipelineStats st = nv::run_checks(
        2, [&](size_t) { return r; }, [](size_t, nv::CheckReport* rep, std::exception_ptr err) {
          EXPECT_FALSE(err);
          EXPECT_NE(rep, nullptr);
        });
    EXPECT_FALSE(st.overlapped) << v;
    EXPECT_EQ(st.cases, 2) << v;
  }
}

TEST(RunChecksDevices, RepeatedDeviceGivesTheReportsOfOneWorker) {
  if (!kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device";
  std::vector<nv::CheckRequest> reqs;
  for (int t : {300, 301, 1000, 57, 4096})
    for (const char* form : {"plain", "res"}) {
      nv::CheckRequest r;
      r.id = seeds::parse_case("H=64,T=" + std::to_string(t) + ",w=bf16,form=" + form + ",family=cancel,seed=3");
      r.impls = {"bwd_det_chunked", "bwd_nondet_atomic", "fp32-baseline"};
      r.backend = nv::Backend::gpu;
      reqs.push_back(r);
    }
  // requested: how many requests the pipeline has asked for when done(i)
  // runs (request(i) is called by the prepare of case i).
  std::atomic<size_t> requested{0};
  std::vector<size_t> requested_at_done;
  auto run = [&](const std::vector<int>& devices, nv::PipelineStats* st) {
    std::vector<std::string> out;
    requested = 0;
    requested_at_done.clear();
    *st = nv::run_checks(
        reqs.size(),
        [&](size_t i) {
          ++requested;
          return reqs[i];
        },
        [&](size_t i, nv::CheckReport* rep, std::exception_ptr err) {
          requested_at_done.push_back(requested.load());
          ASSERT_FALSE(err) << i;
          // Everything but wall times (the JSON's seconds; MPFR's seconds in
          // the text's oracle line).
          nlohmann::json j = nv::to_json(*rep);
          j.erase("seconds");
          for (auto& ir : j["impls"]) ir.erase("seconds");
          for (const char* k : {"ref", "ideal"}) j["oracle"]["escalations"][k].erase("seconds");
          std::string text = nv::format_report(*rep);
          const size_t o = text.find("\noracle "), e = text.find('\n', o + 1);
          text.erase(o, e - o);
          out.push_back(text + j.dump());
        },
        devices);
    return out;
  };
  nv::PipelineStats one, three, serial;
  OverlapEnv env;  // the default first, whatever the caller's environment says
  env.set(nullptr);
  const auto a = run({0}, &one);
  const auto b = run({0, 0, 0}, &three);
  ASSERT_EQ(a.size(), reqs.size());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(one.overlapped);
  EXPECT_TRUE(three.overlapped);
  {
    // NORMGATE_OVERLAP=0: the same reports, one case in flight at a time
    // (case i+1 not yet requested when case i is done), no overlap in stats.
    env.set("0");
    const auto c = run({0, 0, 0}, &serial);
    EXPECT_EQ(a, c);
    EXPECT_FALSE(serial.overlapped);
    ASSERT_EQ(requested_at_done.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(requested_at_done[i], i + 1) << i;
    EXPECT_EQ(serial.elements, one.elements);
  }
  EXPECT_EQ(one.devices, (std::vector<int>{0}));
  EXPECT_EQ(three.devices, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(one.elements, three.elements);
  EXPECT_GT(three.phases.downloads, 0.0);
  EXPECT_GT(three.phases.kernels, 0.0);
  EXPECT_GT(three.phases.generation, 0.0);
  EXPECT_THROW((void)nv::run_checks(1, [&](size_t i) { return reqs[i]; },
                                    [](size_t, nv::CheckReport*, std::exception_ptr) {},
                                    {kernels::device_count()}),
               std::invalid_argument);
}

}  // namespace
