// harness/src/host_pool.cpp: host_pool.h and ReuseHostBuffers /
// recycle_host_buffers (runner.h). Plain C++: built with and without CUDA.
#include "host_pool.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "normgate/harness/runner.h"

namespace normgate::kernels {
namespace detail {

void advise_huge_pages(const void* p, size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1), hi = (a + bytes) & ~(kHuge - 1);
  if (bytes < kHugeAdviceMinBytes || hi <= lo) return;
  // Advice only: refused (no THP in this kernel, a non-anonymous mapping),
  // the memory works as before.
  (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

void copy_bytes(void* dst, const void* src, size_t bytes, int threads) {
  constexpr size_t kMinPerThread = size_t{4} << 20;
  const size_t most = bytes / kMinPerThread;
  const int nt = static_cast<int>(std::min<size_t>(threads > 1 ? static_cast<size_t>(threads) : 1, most > 0 ? most : 1));
  if (nt <= 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  // nt parts of ceil(bytes / nt) rounded up to whole 64-byte lines (so they
  // cover every byte; the last one may be shorter).
  const size_t part = ((bytes + static_cast<size_t>(nt) - 1) / static_cast<size_t>(nt) + 63) / 64 * 64;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#pragma omp parallel for num_threads(nt) schedule(static, 1)
  for (int k = 0; k < nt; ++k) {
    const size_t b0 = std::min(bytes, static_cast<size_t>(k) * part);
    const size_t b1 = std::min(bytes, b0 + part);
    if (b1 > b0) std::memcpy(d + b0, s + b0, b1 - b0);
  }
}

int copy_threads() {
  // Read at every call (a few per 64 MiB chunk), so a test or a bench can
  // change it between runs.
  const char* e = std::getenv("NORMGATE_COPY_THREADS");
  if (e == nullptr || *e == '\0') return 1;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return end != nullptr && *end == '\0' && v >= 1 && v <= 64 ? static_cast<int>(v) : 1;
}

DownloadPath download_path() {
  const char* e = std::getenv("NORMGATE_DOWNLOAD");
  if (e != nullptr && std::strcmp(e, "staged") == 0) return DownloadPath::staged;
  if (e != nullptr && *e != '\0' && std::strcmp(e, "direct") != 0) {
    // Read mid-run, where failing would lose work: said once, then direct.
    static std::once_flag said;
    std::call_once(said, [e] {
      std::fprintf(stderr, "normgate: NORMGATE_DOWNLOAD='%s' is neither 'direct' nor 'staged'; using direct\n", e);
    });
  }
  return DownloadPath::direct;
}

namespace {
std::atomic<uint64_t> g_direct_bytes{0}, g_direct_refused{0};
std::atomic<int64_t> g_direct_live{0};
}  // namespace

DirectDownloadStats direct_download_stats() {
  DirectDownloadStats s;
  s.bytes = g_direct_bytes.load();
  s.refused = g_direct_refused.load();
  s.live = g_direct_live.load();
  return s;
}

void note_direct_download(uint64_t bytes, uint64_t refused, int64_t live_delta) noexcept {
  g_direct_bytes += bytes;
  g_direct_refused += refused;
  g_direct_live += live_delta;
}

namespace {
struct HostPool {
  std::mutex mu;
  int scopes = 0;
  std::vector<std::vector<uint16_t>> free;  // handed back, not taken yet
};
HostPool& host_pool() {
  static HostPool* p = new HostPool;  // never destroyed: usable from static destructors at exit
  return *p;
}
// Capacity of the pooled vectors in bytes (caller holds p.mu).
size_t pooled_bytes(const HostPool& p) {
  size_t b = 0;
  for (const auto& v : p.free) b += v.capacity() * sizeof(uint16_t);
  return b;
}
}  // namespace

std::vector<uint16_t> take_host_u16(size_t n) {
  HostPool& p = host_pool();
  std::vector<uint16_t> drop;  // freed outside the lock
  {
    const std::lock_guard<std::mutex> lock(p.mu);
    if (p.scopes == 0 || n < kMinPooledElems) return {};
    size_t best = p.free.size(), largest = p.free.size();
    for (size_t i = 0; i < p.free.size(); ++i) {
      const size_t cap = p.free[i].capacity();
      if (cap >= n && (best == p.free.size() || cap < p.free[best].capacity())) best = i;
      if (largest == p.free.size() || cap > p.free[largest].capacity()) largest = i;
    }
    if (best < p.free.size()) {
      std::vector<uint16_t> v = std::move(p.free[best]);
      p.free.erase(p.free.begin() + static_cast<std::ptrdiff_t>(best));
      return v;
    }
    // None fits: free the largest (too small) one, so the pool does not keep
    // its memory next to the new allocation.
    if (largest < p.free.size()) {
      drop = std::move(p.free[largest]);
      p.free.erase(p.free.begin() + static_cast<std::ptrdiff_t>(largest));
    }
  }
  drop = std::vector<uint16_t>();
  std::vector<uint16_t> v;
  v.reserve(2 * n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(uint16_t));  // before any page of it is touched
  return v;
}

void give_host_u16(std::vector<uint16_t>& v) noexcept {
  std::vector<uint16_t> mine = std::move(v);
  v.clear();  // moved-from: make "left empty" explicit
  std::vector<std::vector<uint16_t>> drop;  // all free after the lock is released
  try {
    HostPool& p = host_pool();
    const std::lock_guard<std::mutex> lock(p.mu);
    if (p.scopes == 0 || mine.capacity() < kMinPooledElems) return;
    drop.reserve(p.free.size() + 1);
    p.free.push_back(std::move(mine));  // on bad_alloc mine is unchanged, freed below
    // Over kMaxPooled vectors or kMaxPooledBytes of capacity: free the smallest first.
    while (p.free.size() > kMaxPooled || (p.free.size() > 1 && pooled_bytes(p) > kMaxPooledBytes)) {
      auto smallest = std::min_element(p.free.begin(), p.free.end(),
                                       [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
      drop.push_back(std::move(*smallest));
      p.free.erase(smallest);
    }
  } catch (...) {
    // Not kept (lock or allocation failure): freed, as outside a scope.
  }
}

HostPoolStats host_pool_stats() {
  HostPool& p = host_pool();
  const std::lock_guard<std::mutex> lock(p.mu);
  HostPoolStats s;
  s.vectors = p.free.size();
  s.bytes = pooled_bytes(p);
  return s;
}

}  // namespace detail

ReuseHostBuffers::ReuseHostBuffers() {
  detail::HostPool& p = detail::host_pool();
  const std::lock_guard<std::mutex> lock(p.mu);
  ++p.scopes;
}

ReuseHostBuffers::~ReuseHostBuffers() {
  detail::HostPool& p = detail::host_pool();
  std::vector<std::vector<uint16_t>> drop;
  {
    const std::lock_guard<std::mutex> lock(p.mu);
    if (--p.scopes == 0) drop.swap(p.free);
  }
}  // drop frees here

void recycle_host_buffers(seeds::HostInputs& in) noexcept {
  for (std::vector<uint16_t>* v : {&in.x, &in.dy, &in.u, &in.dh_new}) detail::give_host_u16(*v);
}

void recycle_host_buffers(Outputs& out) noexcept {
  for (std::vector<uint16_t>* v : {&out.y, &out.dx, &out.h_new}) detail::give_host_u16(*v);
}

}  // namespace normgate::kernels
