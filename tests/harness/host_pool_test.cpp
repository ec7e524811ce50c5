// tests/harness/host_pool_test.cpp: The host side of the GPU runs' downloads (harness/src/host_pool.h): the
// pool of vectors behind ReuseHostBuffers and the multi-threaded copy out of
// the staging buffers. Plain C++: runs without a GPU (the GPU path through
// them: BwdEdge.KeptHostBuffersGiveTheSameBits in tests/kernels/bwd_edge_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_pool.h"
#include "normgate/harness/runner.h"
#include "normgate/seeds/case_id.h"
#include "normgate/harness/pipeline.h"

namespace normgate::kernels::test {
namespace {

using detail::give_host_u16;
using detail::host_pool_stats;
using detail::kMaxPooled;
using detail::kMinPooledElems;
using detail::take_host_u16;

std::vector<uint16_t> filled(size_t n, uint16_t v) { return std::vector<uint16_t>(n, v); }

TEST(HostCopy, EqualsMemcpyForEverySizeAndThreadCount) {
  const size_t big = (size_t{9} << 20) + 77;  // several 4 MiB parts, not a multiple of 64
  std::vector<unsigned char> src(big);
  for (size_t i = 0; i < big; ++i) src[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4} << 20, (size_t{8} << 20) + 1, big})
    for (int threads : {0, 1, 2, 3, 4, 16}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes, " + std::to_string(threads) + " threads");
      std::vector<unsigned char> dst(big + 1, 0xAB);
      detail::copy_bytes(dst.data(), src.data(), bytes, threads);
      EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), bytes));
      for (size_t i = bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << "wrote past the end at " << i;
    }
}

TEST(HostCopy, ThreadsFromTheEnvironment) {
  const char* old = std::getenv("NORMGATE_COPY_THREADS");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("NORMGATE_COPY_THREADS");
  EXPECT_EQ(detail::copy_threads(), 1);
  for (const char* bad : {"", "0", "65", "-2", "3x", "x"}) {
    setenv("NORMGATE_COPY_THREADS", bad, 1);
    EXPECT_EQ(detail::copy_threads(), 1) << "'" << bad << "'";
  }
  setenv("NORMGATE_COPY_THREADS", "4", 1);
  EXPECT_EQ(detail::copy_threads(), 4);
  setenv("NORMGATE_COPY_THREADS", "64", 1);
  EXPECT_EQ(detail::copy_threads(), 64);
  if (old != nullptr)
    setenv("NORMGATE_COPY_THREADS", saved.c_str(), 1);
  else
    unsetenv("NORMGATE_COPY_THREADS");
}

TEST(HostCopy, DownloadPathFromTheEnvironment) {
  const char* old = std::getenv("NORMGATE_DOWNLOAD");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("NORMGATE_DOWNLOAD");
  EXPECT_EQ(detail::download_path(), detail::DownloadPath::direct);
  setenv("NORMGATE_DOWNLOAD", "staged", 1);
  EXPECT_EQ(detail::download_path(), detail::DownloadPath::staged);
  for (const char* other : {"", "direct"}) {
    setenv("NORMGATE_DOWNLOAD", other, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(detail::download_path(), detail::DownloadPath::direct) << "'" << other << "'";
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "'" << other << "'";
  }
  // Anything else: direct, and said once (the first such value of the process).
  testing::internal::CaptureStderr();
  for (const char* other : {"Staged", "staged ", "0"}) {
    setenv("NORMGATE_DOWNLOAD", other, 1);
    EXPECT_EQ(detail::download_path(), detail::DownloadPath::direct) << "'" << other << "'";
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "normgate: NORMGATE_DOWNLOAD='Staged' is neither 'direct' nor 'staged'; using direct\n");
  if (old != nullptr)
    setenv("NORMGATE_DOWNLOAD", saved.c_str(), 1);
  else
    unsetenv("NORMGATE_DOWNLOAD");
}

// The THP mode of this kernel ("always", "madvise", "never"), "" without one.
std::string thp_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(f, all);
  const size_t a = all.find('['), b = all.find(']');
  return a == std::string::npos || b == std::string::npos || b < a ? "" : all.substr(a + 1, b - a - 1);
}

// /proc/self/smaps' THPeligible of the mapping holding address p: 1 or 0,
// -1 when not found.
int thp_eligible(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream h(line);
    if (h >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::stoi(line.substr(12));
  }
  return -1;
}

// New pooled vectors (and advise_huge_pages itself) ask for transparent
// huge pages, which make the direct downloads' page-locking and the first
// touch of their pages cheaper (host_pool.h advise_huge_pages). Checked
// where the kernel's THP mode is "madvise", so that the advice is what
// decides: a vector allocated without it stays ineligible.
TEST(HostPool, NewVectorsAskForHugePages) {
  if (thp_mode() != "madvise") GTEST_SKIP() << "THP mode '" << thp_mode() << "': the advice decides nothing here";
  const size_t n = size_t{8} << 20;  // 16 MiB of BF16: several whole 2 MiB pages
  const uintptr_t huge = uintptr_t{2} << 20;
  auto inner = [&](const void* p) {  // the first 2 MiB boundary inside, plus one page
    return reinterpret_cast<const void*>(((reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1)) + 4096);
  };
  std::vector<uint16_t> plain;
  plain.reserve(2 * n);
  // glibc's hugetlb tunable (tools/h200.sh and gate_throughput.sh set it)
  // madvises every large malloc chunk itself: then a plain allocation is
  // eligible too, and nothing tells the pool's advice apart.
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("glibc.malloc.hugetlb=") != std::string::npos &&
      thp_eligible(inner(plain.data())) == 1)
    GTEST_SKIP() << "GLIBC_TUNABLES='" << tunables << "' advises plain allocations too: nothing to tell apart";
  ASSERT_EQ(thp_eligible(inner(plain.data())), 0) << "a plain allocation is already eligible: nothing to tell apart";
  {
    const ReuseHostBuffers keep;
    std::vector<uint16_t> v = take_host_u16(n);
    ASSERT_GE(v.capacity(), 2 * n);
    EXPECT_EQ(thp_eligible(inner(v.data())), 1);
    v.assign(n, 7);  // the memory works as before
    EXPECT_EQ(v[n - 1], 7);
  }
  std::vector<uint16_t> w;
  w.reserve(2 * n);
  detail::advise_huge_pages(w.data(), w.capacity() * sizeof(uint16_t));
  EXPECT_EQ(thp_eligible(inner(w.data())), 1);
}

TEST(HostPool, OutsideAScopeNothingIsKept) {
  EXPECT_TRUE(take_host_u16(kMinPooledElems * 4).empty());
  EXPECT_EQ(take_host_u16(kMinPooledElems * 4).capacity(), 0u);  // the caller allocates, as before
  std::vector<uint16_t> v = filled(kMinPooledElems * 2, 1);
  give_host_u16(v);
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(host_pool_stats().vectors, 0u);
}

TEST(HostPool, HandsBackTheSmallestVectorThatFits) {
  const ReuseHostBuffers keep;
  const size_t m = kMinPooledElems;
  std::vector<uint16_t> a = filled(4 * m, 1), b = filled(2 * m, 2), c = filled(8 * m, 3);
  const uint16_t *pa = a.data(), *pb = b.data();
  give_host_u16(a);
  give_host_u16(b);
  give_host_u16(c);
  EXPECT_TRUE(a.empty() && b.empty() && c.empty());
  EXPECT_EQ(host_pool_stats().vectors, 3u);
  // 3m fits a (4m) and c (8m): the smaller, a, with its old size and contents.
  std::vector<uint16_t> t = take_host_u16(3 * m);
  EXPECT_EQ(t.data(), pa);
  EXPECT_EQ(t.size(), 4 * m);
  EXPECT_EQ(t[0], 1);
  std::vector<uint16_t> u = take_host_u16(m);  // b
  EXPECT_EQ(u.data(), pb);
  // Larger than every pooled vector: the largest (c) is freed, a new empty
  // vector with room for 2x is returned.
  // (Its address may come back from the allocator: only the pool count says c was freed.)
  std::vector<uint16_t> w = take_host_u16(9 * m);
  EXPECT_TRUE(w.empty());
  EXPECT_GE(w.capacity(), 18 * m);
  EXPECT_EQ(host_pool_stats().vectors, 0u);
  // Empty pool: a new vector with room, too.
  std::vector<uint16_t> z = take_host_u16(2 * m);
  EXPECT_TRUE(z.empty());
  EXPECT_GE(z.capacity(), 4 * m);
  // Below the minimum: never pooled, never taken from the pool.
  std::vector<uint16_t> small = filled(m - 1, 4);
  give_host_u16(small);
  EXPECT_EQ(host_pool_stats().vectors, 0u);
  give_host_u16(t);
  EXPECT_EQ(take_host_u16(m - 1).capacity(), 0u);
  EXPECT_EQ(host_pool_stats().vectors, 1u);
}

TEST(HostPool, BoundedAndEmptiedWhenTheLastScopeEnds) {
  const size_t m = kMinPooledElems;
  {
    const ReuseHostBuffers outer;
    {
      const ReuseHostBuffers inner;
      for (size_t k = 0; k < kMaxPooled + 3; ++k) {
        std::vector<uint16_t> v;
        v.reserve(m + k);  // distinct capacities: the smallest go first
        v.resize(m);
        give_host_u16(v);
      }
      const detail::HostPoolStats s = host_pool_stats();
      EXPECT_EQ(s.vectors, kMaxPooled);
      size_t want = 0;
      for (size_t k = 3; k < kMaxPooled + 3; ++k) want += (m + k) * sizeof(uint16_t);
      EXPECT_EQ(s.bytes, want);
    }
    EXPECT_EQ(host_pool_stats().vectors, kMaxPooled);  // one scope still lives
  }
  EXPECT_EQ(host_pool_stats().vectors, 0u);
  EXPECT_EQ(host_pool_stats().bytes, 0u);
}

// The pipeline's overlap at the pool's level: case k's vectors are read
// while case k+1 takes its own; k+1 gets only what was handed back before
// (k-1's), never one of k's, and k's contents are not touched.
TEST(HostPool, OverlappingCasesNeverShareAVector) {
  const ReuseHostBuffers keep;
  const size_t m = kMinPooledElems;
  auto take_set = [&](uint16_t tag) {
    std::vector<std::vector<uint16_t>> set;
    for (size_t n : {3 * m, 3 * m, 2 * m}) {
      std::vector<uint16_t> v = take_host_u16(n);
      v.assign(n, tag);  // what a download leaves: n elements, all written
      set.push_back(std::move(v));
    }
    return set;
  };
  auto give_set = [](std::vector<std::vector<uint16_t>>& set) {
    for (auto& v : set) give_host_u16(v);
  };
  std::vector<std::vector<uint16_t>> prev = take_set(0);
  for (uint16_t k = 1; k < 6; ++k) {
    std::vector<std::vector<uint16_t>> cur = take_set(k);  // prev is still being read
    for (const auto& a : cur)
      for (const auto& b : prev) {
        const bool disjoint = a.data() + a.capacity() <= b.data() || b.data() + b.capacity() <= a.data();
        EXPECT_TRUE(disjoint) << "case " << k << " got storage of case " << k - 1;
      }
    for (const auto& b : prev)
      for (uint16_t e : b) ASSERT_EQ(e, k - 1);
    give_set(prev);  // case k-1 done
    prev = std::move(cur);
  }
  EXPECT_EQ(host_pool_stats().vectors, 3u);  // the last case handed back its three
}

TEST(HostPool, RecycleLeavesTheOtherFieldsAlone) {
  const ReuseHostBuffers keep;
  const size_t n = kMinPooledElems;
  seeds::HostInputs in;
  in.x = filled(n, 1);
  in.dy = filled(n, 2);
  in.u = filled(n, 3);
  in.dh_new = filled(n, 4);
  in.w_bf16 = filled(16, 5);
  in.rows = 7;
  recycle_host_buffers(in);
  EXPECT_TRUE(in.x.empty() && in.dy.empty() && in.u.empty() && in.dh_new.empty());
  EXPECT_EQ(in.w_bf16.size(), 16u);
  EXPECT_EQ(in.rows, 7);
  Outputs o;
  o.y = filled(n, 1);
  o.dx = filled(n, 2);
  o.rstd.assign(5, 1.0f);
  o.dw.assign(6, 2.0f);
  recycle_host_buffers(o);
  EXPECT_TRUE(o.y.empty() && o.dx.empty() && o.h_new.empty());
  EXPECT_EQ(o.rstd.size(), 5u);
  EXPECT_EQ(o.dw.size(), 6u);
  EXPECT_EQ(host_pool_stats().vectors, 6u);
}

// The CPU backend's pipeline is unchanged: no scope, nothing kept.
TEST(HostPool, CpuPipelineKeepsNothing) {
  const seeds::CaseId c = seeds::parse_case("H=1024,T=600,w=bf16,form=plain,family=normal,seed=2");
  size_t done = 0;
  validators::run_checks(
      2,
      [&](size_t) {
        return validators::CheckRequest{c, {"bwd_det_chunked"}, validators::Backend::cpu, 2,
                                        oracle::OracleMode::fp64};
      },
      [&](size_t, validators::CheckReport* rep, std::exception_ptr err) {
        EXPECT_FALSE(err);
        EXPECT_NE(rep, nullptr);
        EXPECT_EQ(host_pool_stats().vectors, 0u);
        ++done;
      });
  EXPECT_EQ(done, 2u);
  EXPECT_EQ(host_pool_stats().vectors, 0u);
}

// Every key whose name holds "seconds" removed (timings differ run to run).
void drop_timings(nlohmann::json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (it.key().find("seconds") != std::string::npos) {
        it = j.erase(it);
      } else {
        drop_timings(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (auto& e : j) drop_timings(e);
  }
}

// The gate's own path through the pool on a GPU: run_checks (GPU backend,
// overlapped cases, host vectors handed back by finish_check and taken by the
// next cases' downloads) over cases of at least 2^19 elements that grow,
// shrink and change form, against run_check of each case alone (outside any
// scope: fresh vectors). Every report must be the same, timings aside.
TEST(HostPool, GpuChecksThroughThePoolEqualSingleChecks) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)";
  const char* ids[] = {"H=1024,T=1100,w=bf16,form=plain,family=cancel,seed=1",
                       "H=1024,T=600,w=fp32,form=res,family=llm,seed=2",
                       "H=256,T=100,w=bf16,form=heads24,family=normal,seed=3",
                       "H=1024,T=1300,w=bf16,form=plain,family=llm,seed=4",
                       "H=1024,T=700,w=bf16,form=res,family=cancel,seed=5"};
  constexpr size_t n = sizeof(ids) / sizeof(ids[0]);
  auto request = [&](size_t i) {
    return validators::CheckRequest{seeds::parse_case(ids[i]), {"bwd_det_chunked", "fp32-baseline"},
                                    validators::Backend::gpu, 2, oracle::OracleMode::auto_};
  };
  std::vector<nlohmann::json> pooled(n);
  size_t most_pooled = 0;
  const validators::PipelineStats st = validators::run_checks(
      n, request, [&](size_t i, validators::CheckReport* rep, std::exception_ptr err) {
        ASSERT_FALSE(err) << ids[i];
        ASSERT_NE(rep, nullptr);
        pooled[i] = validators::to_json(*rep);
        most_pooled = std::max(most_pooled, host_pool_stats().vectors);
      });
  EXPECT_EQ(st.cases, static_cast<int64_t>(n));
  EXPECT_GT(most_pooled, 0u);  // the pool was in use
  EXPECT_EQ(host_pool_stats().vectors, 0u);  // and emptied with its scope
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(ids[i]);
    nlohmann::json alone = validators::to_json(validators::run_check(request(i)));
    drop_timings(alone);
    drop_timings(pooled[i]);
    EXPECT_EQ(pooled[i], alone);
    EXPECT_EQ(alone["impls"].size(), 2u);
  }
}

}  // namespace
}  // namespace normgate::kernels::test
