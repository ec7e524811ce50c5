// harness/src/runner.cu: run_gpu() (runner.h): one case end to end on the GPU,
// poisoned outputs, inputs generated or uploaded, downloads through the host pool.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "device_buffer.h"
#include "host_download.h"
#include "host_pool.h"
#include "launch.h"
#include "normgate/core/output_digest.h"
#include "normgate/harness/devices.h"
#include "normgate/harness/runner.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// Fill n 32-bit words: with `pattern`, or (garbage) with a hash of the index
/// and `seed` (every bit pattern, NaNs and Infs included, is possible).
__global__ void fill_words_kernel(uint32_t* p, int64_t n, uint32_t pattern, uint32_t seed, bool garbage) {
  for (int64_t i = global_thread(); i < n; i += global_threads()) {
    uint32_t v = pattern;
    if (garbage) {  // murmur3 finalizer of (i, seed)
      v = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ (seed * 0x85EBCA77u);
      v ^= v >> 16;
      v *= 0x85EBCA6Bu;
      v ^= v >> 13;
      v *= 0xC2B2AE35u;
      v ^= v >> 16;
    }
    p[i] = v;
  }
}

/// Count BF16 elements of buf[0, n) outside the view (before `off`, in the
/// gap of each token row past `inner`, after the last token) that are not the
/// poison 0x7FC0.
__global__ void outside_view_kernel(const uint16_t* buf, int64_t n, int64_t off, int64_t stride, int64_t inner,
                                    int64_t T, unsigned long long* count) {
  unsigned long long c = 0;
  // Before the view, and after its last row.
  const int64_t tail = T > 0 ? off + (T - 1) * stride + inner : off;
  for (int64_t i = global_thread(); i < off; i += global_threads()) c += buf[i] != 0x7FC0u ? 1u : 0u;
  for (int64_t i = tail + global_thread(); i < n; i += global_threads()) c += buf[i] != 0x7FC0u ? 1u : 0u;
  // The gap after each row but the last: [t*stride + inner, (t+1)*stride).
  for (int64_t t = blockIdx.x; t + 1 < T; t += gridDim.x)
    for (int64_t j = inner + threadIdx.x; j < stride; j += blockDim.x) c += buf[off + t * stride + j] != 0x7FC0u ? 1u : 0u;
  if (c != 0) atomicAdd(count, c);
}

/// *flag = 1 when the first n 32-bit words of a and b differ anywhere.
__global__ void differ_kernel(const uint32_t* a, const uint32_t* b, int64_t n, int* flag) {
  bool d = false;
  for (int64_t i = global_thread(); i < n; i += global_threads()) d |= a[i] != b[i];
  if (__syncthreads_or(d) && threadIdx.x == 0) atomicOr(flag, 1);
}

/// *sum += the digest terms (core/output_digest.h) of the rows x cols view at
/// p (row r at p + r*pitch), element (r, c) at packed index r*cols + c.
/// Grid: x over columns, y over rows (strided). The sum is order-free.
template <class E>
__global__ void digest_kernel(const E* p, int64_t rows, int64_t cols, int64_t pitch, unsigned long long* sum) {
  uint64_t acc = 0;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      acc += core::digest_term(static_cast<uint64_t>(r * cols + c), p[r * pitch + c]);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xFFFFFFFFu, acc, o);
  if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd(sum, static_cast<unsigned long long>(acc));
}

}  // namespace
}  // namespace dev

namespace {

// The digest (core/output_digest.h) of a rows x cols view of E at p, row
// pitch `pitch` elements, computed on the device; `scratch` holds 8 bytes.
template <class E>
uint64_t device_digest(const E* p, int64_t rows, int64_t cols, int64_t pitch, const detail::Region& scratch,
                       cudaStream_t s) {
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  unsigned long long sum = 0;
  if (n > 0) {
    NG_CUDA(cudaMemsetAsync(scratch.get(), 0, sizeof(unsigned long long), s));
    const int64_t gx = std::min<int64_t>((cols + 255) / 256, 1024);
    const int64_t gy = std::min<int64_t>(rows, std::max<int64_t>(1, 8192 / gx));
    dev::digest_kernel<E><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), 256, 0, s>>>(
        p, rows, cols, pitch, scratch.as<unsigned long long>());
    NG_CUDA_LAUNCHED("digest_kernel");
    NG_CUDA(cudaMemcpyAsync(&sum, scratch.get(), sizeof(sum), cudaMemcpyDeviceToHost, s));
    NG_CUDA(cudaStreamSynchronize(s));
  }
  return core::digest_finish(sum, n, sizeof(E));
}

void fill_words(const detail::Region& b, uint32_t pattern, uint32_t seed, bool garbage, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(b.bytes() / 4);
  if (n == 0) return;
  const int64_t want = (n + 255) / 256;
  dev::fill_words_kernel<<<static_cast<unsigned>(want < 8192 ? want : 8192), 256, 0, s>>>(
      b.as<uint32_t>(), n, pattern, seed, garbage);
  NG_CUDA_LAUNCHED("fill_words_kernel");
}

[[noreturn]] void bad_run(const std::string& msg) { throw std::invalid_argument("run_gpu: " + msg); }

// Throws std::runtime_error when a kernel wrote outside its output view
// (`inner` elements per token row of `stride`, starting `off` elements into
// the NaN-poisoned buffer b). Synchronizes.
// `count` is a device buffer of at least one unsigned long long (reset here).
void check_outside_view(const detail::Region& b, int64_t off, int64_t stride, int64_t inner, int64_t T,
                        const char* what, std::string_view variant, const detail::Region& count,
                        cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(b.bytes() / 2);
  NG_CUDA(cudaMemsetAsync(count.get(), 0, sizeof(unsigned long long), s));
  if (n > 0) {
    const int64_t want = (n + 255) / 256;
    dev::outside_view_kernel<<<static_cast<unsigned>(want < 4096 ? want : 4096), 256, 0, s>>>(
        b.as<uint16_t>(), n, off, stride, inner, T, count.as<unsigned long long>());
    NG_CUDA_LAUNCHED("outside_view_kernel");
  }
  unsigned long long bad = 0;
  NG_CUDA(cudaMemcpyAsync(&bad, count.get(), sizeof bad, cudaMemcpyDeviceToHost, s));
  NG_CUDA(cudaStreamSynchronize(s));
  if (bad != 0)
    throw std::runtime_error("run_gpu: " + std::string(variant) + " wrote " + std::to_string(bad) + " " + what +
                             " elements outside its view (row stride " + std::to_string(stride) + ", " +
                             std::to_string(inner) + " elements per row)");
}

}  // namespace

namespace detail {

namespace {
// Two pinned staging buffers and their events per device (pinned memory and
// events belong to the device that was current when they were made), each
// set reused by every thread of that device under its own mutex; made on
// first use, never destroyed (no cudaFreeHost after the runtime's teardown
// at exit).
struct Staging {
  std::mutex mu;
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t ev[2] = {nullptr, nullptr};
  void ensure() {
    for (int b = 0; b < 2; ++b) {
      if (buf[b] == nullptr) NG_CUDA(cudaHostAlloc(&buf[b], kStageBytes, cudaHostAllocDefault));
      if (ev[b] == nullptr) NG_CUDA(cudaEventCreateWithFlags(&ev[b], cudaEventDisableTiming));
    }
  }
};
Staging& staging_of_current_device() {
  static std::mutex mu;
  static auto* sets = new std::vector<std::unique_ptr<Staging>>;
  int dev = 0;
  NG_CUDA(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (sets->size() <= static_cast<size_t>(dev)) sets->resize(static_cast<size_t>(dev) + 1);
  auto& st = (*sets)[static_cast<size_t>(dev)];
  if (!st) st = std::make_unique<Staging>();
  return *st;
}
}  // namespace

void download_rows(const DownloadSink& sink, const void* src, size_t width, size_t pitch, size_t rows,
                   cudaStream_t s) {
  if (rows == 0 || width == 0) return;
  if (pitch < width) throw std::invalid_argument("download_rows: pitch " + std::to_string(pitch) + " < width " +
                                                 std::to_string(width));
  Staging& st = staging_of_current_device();
  const std::lock_guard<std::mutex> lock(st.mu);
  // On an error (a failing copy, event or sink) a copy issued into a staging
  // buffer may still be in flight when the exception leaves: wait for the
  // stream before `lock` is released (this guard is destroyed first), so the
  // next user of the buffers cannot race with it. The first error is the one
  // thrown; the wait's own status is ignored (a sticky error repeats it).
  struct DrainOnError {
    cudaStream_t s;
    int pending = std::uncaught_exceptions();
    ~DrainOnError() {
      if (std::uncaught_exceptions() > pending) (void)cudaStreamSynchronize(s);
    }
  } drain{s};
  st.ensure();
  // Chunks of whole rows, or (a row wider than a buffer; not reached by
  // run_gpu: H <= 2^20) of one row's kStageBytes pieces, in order.
  struct Chunk {
    const char* from;
    size_t w, n, pitch;  // n rows of w bytes, source pitch
  };
  const auto* in = static_cast<const char*>(src);
  const bool wide = width > kStageBytes;
  const size_t rows_per = wide ? 1 : kStageBytes / width;
  const size_t pieces = wide ? (width + kStageBytes - 1) / kStageBytes : 1;  // per row
  auto chunk = [&](size_t k) -> Chunk {  // k-th chunk, or n == 0 past the end
    if (wide) {
      const size_t r = k / pieces, q = k % pieces;
      if (r >= rows) return {nullptr, 0, 0, 0};
      const size_t b0 = q * kStageBytes;
      return {in + r * pitch + b0, std::min(kStageBytes, width - b0), 1, pitch};
    }
    const size_t r0 = k * rows_per;
    if (r0 >= rows) return {nullptr, 0, 0, 0};
    const size_t n = std::min(rows_per, rows - r0);
    return {in + r0 * pitch, width, n, pitch};
  };
  auto issue = [&](const Chunk& c, int b) {
    NG_CUDA(cudaMemcpy2DAsync(st.buf[b], c.w, c.from, c.pitch, c.w, c.n, cudaMemcpyDeviceToHost, s));
    NG_CUDA(cudaEventRecord(st.ev[b], s));
  };
  auto land = [&](const Chunk& c, int b) {
    NG_CUDA(cudaEventSynchronize(st.ev[b]));
    sink(st.buf[b], c.w * c.n);
  };
  Chunk prev = chunk(0);
  issue(prev, 0);
  for (size_t k = 1;; ++k) {
    const Chunk next = chunk(k);
    if (next.n > 0) issue(next, static_cast<int>(k % 2));
    land(prev, static_cast<int>((k - 1) % 2));
    if (next.n == 0) break;
    prev = next;
  }
}

bool download_rows_direct(void* dst, const void* src, size_t width, size_t pitch, size_t rows, cudaStream_t s) {
  if (pitch < width) throw std::invalid_argument("download_rows_direct: pitch " + std::to_string(pitch) + " < width " +
                                                 std::to_string(width));
  const size_t total = width * rows;
  if (rows == 0 || width == 0 || total < kDirectMinBytes) return false;
  if (pitch == width) {  // contiguous: one run of bytes, split at pages rather than rows
    width = pitch = total;
    rows = 1;
  }
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto p = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t a = (p + page - 1) / page * page, b = (p + total) / page * page;  // whole pages inside dst
  if (b <= a) return false;
  // The direct part: bytes [lo, hi) of dst, inside [a, b); rows [r0, r1).
  size_t r0 = 0, r1 = 1, lo = a - p, hi = b - p;
  if (rows > 1) {
    r0 = (a - p + width - 1) / width;
    r1 = (b - p) / width;
    if (r1 <= r0) return false;
    lo = r0 * width;
    hi = r1 * width;
  }
  void* const locked = reinterpret_cast<void*>(a);
  if (cudaHostRegister(locked, b - a, cudaHostRegisterPortable) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it and stage instead
    note_direct_download(0, 1, 0);
    return false;
  }
  note_direct_download(0, 0, 1);
  struct Unlock {  // on every exit: no copy in flight into the pages, then unlock them
    void* ptr;
    cudaStream_t st;
    ~Unlock() {
      (void)cudaStreamSynchronize(st);
      (void)cudaHostUnregister(ptr);
      note_direct_download(0, 0, -1);
    }
  } unlock{locked, s};
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  if (rows == 1)
    NG_CUDA(cudaMemcpyAsync(out + lo, in + lo, hi - lo, cudaMemcpyDeviceToHost, s));
  else
    NG_CUDA(cudaMemcpy2DAsync(out + lo, width, in + r0 * pitch, pitch, width, r1 - r0, cudaMemcpyDeviceToHost, s));
  // The pieces outside the whole pages, staged (download_rows waits for its
  // own chunks, which the stream orders after the direct copy).
  auto staged = [&](size_t b0, size_t b1, const char* from, size_t w, size_t n) {
    size_t written = 0;
    if (b1 > b0) download_rows(write_to(out + b0, b1 - b0, &written), from, w, rows == 1 ? w : pitch, n, s);
    if (written != b1 - b0) throw std::logic_error("download_rows_direct: a staged piece came back short");
  };
  if (rows == 1) {
    staged(0, lo, in, lo, 1);
    staged(hi, total, in + hi, total - hi, 1);
  } else {
    staged(0, lo, in, width, r0);
    staged(hi, total, in + r1 * pitch, width, rows - r1);
  }
  NG_CUDA(cudaStreamSynchronize(s));
  note_direct_download(hi - lo, 0, 0);
  return true;
}

namespace {
// The kept buffers (ReuseGpuBuffers), in sets of one device each: slot i of
// a set is the i-th RunMemory::get of a run. A set is `busy` while a
// RunMemory uses it; the last scope to end frees the sets (with their device
// current), or the run holding one frees it when it ends after that scope.
struct SlotSet {
  int device = 0;
  bool busy = false;
  std::vector<DeviceBuffer> slots;
};
struct Pool {
  std::mutex mu;
  int scopes = 0;
  std::vector<std::unique_ptr<SlotSet>> sets;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: no cudaFree after the runtime's teardown at exit
  return *p;
}
// Free buffers of `device` with it current (the calling thread's device is
// restored after). Never throws.
void free_on_device(int device, std::vector<DeviceBuffer>& bufs) noexcept {
  int cur = 0;
  const bool know = cudaGetDevice(&cur) == cudaSuccess;
  const bool switched = know && cur != device && cudaSetDevice(device) == cudaSuccess;
  bufs.clear();
  if (switched) (void)cudaSetDevice(cur);
  (void)cudaGetLastError();
}
}  // namespace

RunMemory::RunMemory() {
  int dev = 0;
  NG_CUDA(cudaGetDevice(&dev));
  Pool& p = pool();
  const std::lock_guard<std::mutex> lock(p.mu);
  if (p.scopes == 0) return;
  SlotSet* set = nullptr;
  for (auto& s : p.sets)
    if (s->device == dev && !s->busy) {
      set = s.get();
      break;
    }
  if (set == nullptr) {  // every set of this device is in use by another run: one more
    p.sets.push_back(std::make_unique<SlotSet>());
    set = p.sets.back().get();
    set->device = dev;
  }
  set->busy = true;
  set_ = set;
  pooled_ = true;
}

RunMemory::~RunMemory() {
  if (!pooled_) return;
  Pool& p = pool();
  std::vector<DeviceBuffer> drop;
  {
    const std::lock_guard<std::mutex> lock(p.mu);
    auto* s = static_cast<SlotSet*>(set_);
    s->busy = false;
    // The last scope ended during the run; or the run failed (an
    // out-of-memory among them): the next case starts from an empty set,
    // not from the sum of every slot's largest size so far.
    if (p.scopes == 0 || std::uncaught_exceptions() > 0) drop.swap(s->slots);
    if (p.scopes == 0) std::erase_if(p.sets, [s](const auto& x) { return x.get() == s; });
  }
}  // drop frees here (this run's device is current)

Region RunMemory::get(size_t bytes) {
  if (!pooled_) {
    own_.emplace_back(bytes);
    return Region{own_.back().get(), bytes};
  }
  auto& slots = static_cast<SlotSet*>(set_)->slots;  // busy: only this run touches them
  const size_t i = next_++;
  if (slots.size() <= i) slots.resize(i + 1);
  if (bytes == 0) return Region{};
  if (slots[i].bytes() < bytes) {
    slots[i] = DeviceBuffer();  // free the smaller one first
    try {
      slots[i] = DeviceBuffer(bytes);
    } catch (const std::runtime_error&) {
      // The set holds every slot's largest size so far, which can exceed
      // what this run needs: free the slots this run has not reached yet and
      // try once more; a second failure is this case's own out-of-memory.
      for (size_t k = i + 1; k < slots.size(); ++k) slots[k] = DeviceBuffer();
      slots[i] = DeviceBuffer(bytes);
    }
  }
  return Region{slots[i].get(), bytes};
}

}  // namespace detail

ReuseGpuBuffers::ReuseGpuBuffers() {
  detail::Pool& p = detail::pool();
  const std::lock_guard<std::mutex> lock(p.mu);
  ++p.scopes;
}

ReuseGpuBuffers::~ReuseGpuBuffers() {
  detail::Pool& p = detail::pool();
  std::vector<std::unique_ptr<detail::SlotSet>> drop;  // the sets no run holds
  {
    const std::lock_guard<std::mutex> lock(p.mu);
    if (--p.scopes == 0) {
      std::vector<std::unique_ptr<detail::SlotSet>> keep;
      for (auto& s : p.sets) (s->busy ? keep : drop).push_back(std::move(s));
      p.sets.swap(keep);
    }
  }
  for (auto& s : drop) detail::free_on_device(s->device, s->slots);  // each with its device current
}

namespace {
// Host wall-clock phases of one run (SharedGpuRun): inputs, with generated
// inputs copied back only: the call's start to the end of that copy;
// generation, same condition: the call's start until the host saw the
// generation finish; downloads: time inside device-to-host copies.
struct RunTimes {
  double inputs = 0, generation = 0, downloads = 0;
};

// dx_source == nullptr: every result gets full copies. Otherwise results
// k > 0 get no y/rstd, and no dx when their dx equals (bitwise, compared on
// the device) an earlier variant's; (*dx_source)[k] names that variant.
// inputs_out != nullptr (generated inputs only, host == nullptr): the
// generated x, dy, w (res: u, dh_new) are copied back into it, laid out like
// seeds::generate_host's, and times->inputs gets the wall time from the
// start of this call to the end of that copy (allocation, poison,
// generation, download).
std::vector<Outputs> run_gpu_impl(const std::vector<const Variant*>& bwds, const seeds::CaseId& c, float eps,
                                  const GpuRunOptions& opt, GpuRunInfo* info, const seeds::HostInputs* host,
                                  std::vector<size_t>* dx_source = nullptr, seeds::HostInputs* inputs_out = nullptr,
                                  RunTimes* times = nullptr, OutputDigests* digests = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  RunTimes local;
  RunTimes& tm = times != nullptr ? *times : local;
  // Host time inside the device-to-host copies (RunTimes::downloads).
  auto timed = [&tm](auto&& copy) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    tm.downloads += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (bwds.empty()) bad_run("no backward variant given");
  for (const Variant* bwd : bwds) {
    if (bwd == nullptr) bad_run("null variant");
    if (bwd->op != Op::bwd) bad_run("variant " + std::string(bwd->name) + " is not a backward variant");
    if (!bwd->supports(c.form))
      bad_run("form " + std::string(to_string(c.form)) + " is not supported by " + std::string(bwd->name));
    if (!bwd->supports_h(c.H))
      bad_run("H = " + std::to_string(c.H) + " is not supported by " + std::string(bwd->name));
  }
  const Variant& fwd = opt.fwd != nullptr ? *opt.fwd : default_fwd();
  if (fwd.op != Op::fwd) bad_run("variant " + std::string(fwd.name) + " is not a forward variant");
  if (!fwd.supports(c.form) || !fwd.supports_h(c.H) || !fwd.supports(c.w))
    bad_run("case " + seeds::to_string(c) + " is not supported by the forward " + std::string(fwd.name));
  if (c.T < 0 || c.T > kMaxT) bad_run("T = " + std::to_string(c.T) + " is out of range");
  if (inputs_out != nullptr && host != nullptr) bad_run("download_inputs with given host inputs");
  if (opt.row_pad < 0 || opt.row_pad > 1024) bad_run("row_pad = " + std::to_string(opt.row_pad) + " not in 0..1024");
  if (opt.row_pad != 0 && c.heads() > 1)
    bad_run("row_pad = " + std::to_string(opt.row_pad) + ": the per-head layouts are fixed (heads4 contiguous, "
            "heads24 in packed rows of 40*256)");
  if (opt.misalign_elems < 0 || opt.misalign_elems > 64)
    bad_run("misalign_elems = " + std::to_string(opt.misalign_elems) + " not in 0..64");

  // Layout. plain: [T, H] rows, stride H + row_pad. heads4: contiguous
  // [T, 4, 256]. heads24: [T, 24, 256] as the q part of a packed qkv row of
  // (24+8+8)*256 elements (the k and v parts stay poisoned and are checked).
  // In every layout a token's heads are contiguous (head stride = H), and
  // R = T*heads rows are normalized.
  const int64_t T = c.T, H = c.H, heads = c.heads(), off = opt.misalign_elems;
  const int64_t inner = heads * H;  // a token's elements
  const int64_t stride = c.form == Form::heads24 ? 40 * 256 : inner + opt.row_pad;
  const int64_t R = T * heads;
  // Rounded up to whole 4-byte words: fill_words poisons words, and the
  // outside-view check and the dx compare read every element of the buffer.
  const size_t rows_bytes = (static_cast<size_t>(T > 0 ? (T - 1) * stride + inner : 0) * 2 + 256 + 3) / 4 * 4;
  const size_t wbytes = static_cast<size_t>(H) * (c.w == WDtype::bf16 ? 2 : 4);
  size_t ws_bytes = 0;
  for (const Variant* bwd : bwds) ws_bytes = std::max(ws_bytes, bwd_workspace_bytes(*bwd, R, H));

  // Device memory: kept between runs inside a ReuseGpuBuffers scope, else
  // allocated here and freed on return (RunMemory). Every region is poisoned
  // or fully written below before it is read, so what a kept buffer held
  // before never shows.
  detail::RunMemory mem;
  const detail::Region bx = mem.get(rows_bytes), bdy = mem.get(rows_bytes), by = mem.get(rows_bytes),
                       bdx = mem.get(rows_bytes);
  // Form res: the residual branch u, the forward's h_new (the normalized
  // input, also the backward's x) and the backward's dh_new.
  const bool res = c.form == Form::res;
  const detail::Region bu = mem.get(res ? rows_bytes : 0), bhn = mem.get(res ? rows_bytes : 0),
                       bdn = mem.get(res ? rows_bytes : 0);
  const detail::Region bw = mem.get(wbytes), brstd = mem.get(static_cast<size_t>(R > 0 ? R : 1) * 4),
                       bdw = mem.get(static_cast<size_t>(H) * 4);
  const detail::Region bws = mem.get(ws_bytes);
  const size_t o = static_cast<size_t>(off) * 2;  // cudaMalloc bases are 256-byte aligned
  const int64_t stride_h = heads > 1 ? H : 0;      // a token's heads are contiguous
  const detail::Region count = mem.get(sizeof(unsigned long long));  // check_outside_view's counter
  // The forward's msq, handed to the backward (dw: rstd refined against it).
  const detail::Region bmsq = mem.get(static_cast<size_t>(R > 0 ? R : 1) * 8);
  uint16_t* x = bx.as<uint16_t>(o);
  uint16_t* dy = bdy.as<uint16_t>(o);
  uint16_t* y = by.as<uint16_t>(o);
  uint16_t* dx = bdx.as<uint16_t>(o);

  cudaStream_t s = nullptr;
  fill_words(by, 0x7FC07FC0u, 0, false, s);  // BF16 NaN 0x7FC0 in both halves
  fill_words(brstd, 0x7FC00000u, 0, false, s);  // FP32 NaN
  fill_words(bmsq, 0xFFFFFFFFu, 0, false, s);  // binary64 NaN: a row the forward missed keeps its FP32 rstd

  DeviceInputBuffers in;
  in.x = x;
  in.x_stride = stride;
  in.dy = dy;
  in.dy_stride = stride;
  in.w = bw.get();
  in.heads = heads;
  if (res) {
    in.u = bu.as<uint16_t>(o);
    in.u_stride = stride;
    in.dh_new = bdn.as<uint16_t>(o);
    in.dh_new_stride = stride;
    fill_words(bu, 0x7FC07FC0u, 0, false, s);
    fill_words(bdn, 0x7FC07FC0u, 0, false, s);
    fill_words(bhn, 0x7FC07FC0u, 0, false, s);
  }
  in.stride_h = stride_h;
  fill_words(bx, 0x7FC07FC0u, 0, false, s);  // inputs too: the gaps of a layout are never data
  fill_words(bdy, 0x7FC07FC0u, 0, false, s);
  const size_t pitch = static_cast<size_t>(stride) * 2, width = static_cast<size_t>(inner) * 2;  // bytes
  // Forward-only digests read no backward input: dy and dh_new stay poisoned
  // and no backward runs (run_gpu_digests).
  const bool digest_fwd_only = digests != nullptr && opt.forward_outputs_only;
  if (host == nullptr) {
    if (digest_fwd_only) {
      in.dy = nullptr;
      in.dh_new = nullptr;
    }
    generate_device_inputs(c, in, s);
  } else {  // the caller's inputs (a saved case): upload them
    if (res && (host->u.size() != host->x.size() || host->dh_new.size() != host->x.size()))
      bad_run("host inputs of a res case need u and dh_new of " + std::to_string(host->x.size()) + " elements");
    if (host->rows != R || host->cols != H || host->x.size() != static_cast<size_t>(R * H) ||
        host->dy.size() != host->x.size() ||
        (c.w == WDtype::bf16 ? host->w_bf16.size() : host->w_f32.size()) != static_cast<size_t>(H))
      bad_run("host inputs do not match case " + seeds::to_string(c));
    if (T > 0 && H > 0) {
      NG_CUDA(cudaMemcpy2DAsync(x, pitch, host->x.data(), width, width, static_cast<size_t>(T), cudaMemcpyHostToDevice, s));
      NG_CUDA(cudaMemcpy2DAsync(dy, pitch, host->dy.data(), width, width, static_cast<size_t>(T), cudaMemcpyHostToDevice, s));
      if (res) {
        NG_CUDA(cudaMemcpy2DAsync(in.u, pitch, host->u.data(), width, width, static_cast<size_t>(T),
                                  cudaMemcpyHostToDevice, s));
        NG_CUDA(cudaMemcpy2DAsync(in.dh_new, pitch, host->dh_new.data(), width, width, static_cast<size_t>(T),
                                  cudaMemcpyHostToDevice, s));
      }
    }
    if (H > 0)
      NG_CUDA(cudaMemcpyAsync(bw.get(), c.w == WDtype::bf16 ? static_cast<const void*>(host->w_bf16.data()) : host->w_f32.data(),
                              wbytes, cudaMemcpyHostToDevice, s));
  }

  // Copy a BF16 tensor of the layout back, rows packed, into a vector from
  // the pool of ReuseHostBuffers when a scope lives (its pages are mapped
  // already; NORMGATE_COPY_THREADS may split its copy), else into a fresh one.
  auto download_tensor = [&](std::vector<uint16_t>& dst, const uint16_t* from) {
    timed([&] {
      dst = detail::take_host_u16(static_cast<size_t>(T) * static_cast<size_t>(inner));
      detail::download_rows_into(dst, from, width, pitch, static_cast<size_t>(T), s);
    });
  };

  if (inputs_out != nullptr) {  // the generated inputs, rows packed as generate_host lays them out
    // The downloads below wait for the generation anyway; waiting here first
    // keeps the generation's time out of theirs (RunTimes).
    NG_CUDA(cudaStreamSynchronize(s));
    tm.generation = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    seeds::HostInputs& h = *inputs_out;
    h = seeds::HostInputs{};
    h.id = c;
    h.rows = R;
    h.cols = H;
    download_tensor(h.x, x);
    download_tensor(h.dy, dy);
    if (res) {
      download_tensor(h.u, in.u);
      download_tensor(h.dh_new, in.dh_new);
    }
    timed([&] {
      if (c.w == WDtype::bf16)
        detail::download_into(h.w_bf16, bw.get(), static_cast<size_t>(H), s);
      else
        detail::download_into(h.w_f32, bw.get(), static_cast<size_t>(H), s);
    });
    tm.inputs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  }

  const WeightView wv{c.w, bw.get(), H};
  FwdArgs fa;
  fa.x = x;
  fa.x_stride = stride;
  fa.w = wv;
  fa.y = y;
  fa.y_stride = stride;
  fa.rstd = brstd.as<float>();
  fa.msq = bmsq.as<double>();
  fa.T = T;
  fa.H = H;
  fa.eps = eps;
  fa.form = c.form;
  fa.heads = heads;
  fa.x_stride_h = stride_h;
  fa.y_stride_h = stride_h;
  uint16_t* h_new = res ? bhn.as<uint16_t>(o) : nullptr;
  if (res) {
    fa.u = in.u;
    fa.u_stride = stride;
    fa.h_new = h_new;
    fa.h_new_stride = stride;
  }
  rmsnorm_fwd(fwd, fa, s);
  if (opt.test_write_outside_view && T > 0 && stride > inner) {
    const uint16_t one = 0x3F80;  // 1.0: anything but the poison
    NG_CUDA(cudaMemcpyAsync(y + inner, &one, 2, cudaMemcpyHostToDevice, s));
    NG_CUDA(cudaStreamSynchronize(s));
  }
  check_outside_view(by, off, stride, inner, T, "y", fwd.name, count, s);
  if (res) check_outside_view(bhn, off, stride, inner, T, "h_new", fwd.name, count, s);

  std::vector<Outputs> outs(bwds.size());
  const bool share = dx_source != nullptr;
  if (share) dx_source->assign(bwds.size(), 0);
  // Device copies of the distinct dx tensors seen so far (share mode), with
  // the index of the variant that produced each.
  std::vector<std::pair<size_t, detail::Region>> distinct;
  const detail::Region flag = mem.get(sizeof(int));
  // The backward arguments are the same for every variant but the workspace size.
  BwdArgs ba;
  ba.dy = dy;
  ba.dy_stride = stride;
  ba.x = res ? h_new : x;  // res: the backward normalizes h_new
  ba.x_stride = stride;
  ba.w = wv;
  ba.rstd = brstd.as<float>();
  ba.msq = bmsq.as<double>();
  ba.dx = dx;
  ba.dx_stride = stride;
  ba.form = c.form;
  ba.heads = heads;
  ba.dy_stride_h = stride_h;
  ba.x_stride_h = stride_h;
  ba.dx_stride_h = stride_h;
  if (res) {
    ba.dh_new = in.dh_new;
    ba.dh_new_stride = stride;
  }
  ba.dw = bdw.as<float>();
  ba.T = T;
  ba.H = H;
  ba.workspace = bws.get();
  // The forward's outputs, digested where they lie (run_gpu_digests).
  auto digest_forward = [&](OutputDigests& d, const detail::Region& sc) {
    d.y = device_digest<uint16_t>(y, T, inner, stride, sc, s);
    d.rstd = device_digest<uint32_t>(brstd.as<uint32_t>(), 1, R, R, sc, s);
    d.msq = device_digest<uint64_t>(bmsq.as<uint64_t>(), 1, R, R, sc, s);
    d.has_msq = true;
    d.has_h_new = res;
    if (res) d.h_new = device_digest<uint16_t>(h_new, T, inner, stride, sc, s);
  };
  if (digest_fwd_only) {
    *digests = OutputDigests{};
    digest_forward(*digests, mem.get(sizeof(unsigned long long)));
    return {};
  }
  for (size_t k = 0; k < bwds.size(); ++k) {
    const Variant& bwd = *bwds[k];
    const size_t ws_k = bwd_workspace_bytes(bwd, R, H);
    fill_words(bdx, 0x7FC07FC0u, 0, false, s);
    fill_words(bdw, 0x7FC00000u, 0, false, s);
    fill_words(bws, 0, opt.poison_seed, true, s);
    ba.workspace_bytes = ws_k;
    if (info != nullptr && k == 0) {
      info->fwd_vector = fwd_vector_path(fa);
      info->bwd_vector = bwd_vector_path(ba);
      info->workspace_bytes = ws_k;
    }
    rmsnorm_bwd(bwd, ba, s, opt.controls);
    if (opt.test_flip_dx_of == static_cast<int>(k) && T > 0) {
      uint16_t v = 0;
      NG_CUDA(cudaMemcpyAsync(&v, dx, 2, cudaMemcpyDeviceToHost, s));
      NG_CUDA(cudaStreamSynchronize(s));
      v ^= 1u;
      NG_CUDA(cudaMemcpyAsync(dx, &v, 2, cudaMemcpyHostToDevice, s));
      NG_CUDA(cudaStreamSynchronize(s));
    }
    check_outside_view(bdx, off, stride, inner, T, "dx", bwd.name, count, s);

    Outputs& out = outs[k];
    // forward_outputs_only: dx and dw stay on the device (nobody reads them).
    const bool bwd_outputs = !opt.forward_outputs_only;
    if (digests != nullptr) {  // run_gpu_digests with the backward (forward-only digests returned above)
      OutputDigests& d = *digests;
      const detail::Region sc = mem.get(sizeof(unsigned long long));
      digest_forward(d, sc);
      d.has_bwd = true;
      d.dx = device_digest<uint16_t>(dx, T, inner, stride, sc, s);
      d.dw = device_digest<uint32_t>(bdw.as<uint32_t>(), 1, H, H, sc, s);
      continue;
    }
    if (bwd_outputs) timed([&] { detail::download_into(out.dw, bdw.get(), static_cast<size_t>(H), s); });
    // dx: in share mode, compare with the distinct ones kept on the device.
    bool dx_needed = bwd_outputs;
    if (share && T > 0 && bwd_outputs) {
      const int64_t words = static_cast<int64_t>(bdx.bytes() / 4);
      for (const auto& [src, buf] : distinct) {
        NG_CUDA(cudaMemsetAsync(flag.get(), 0, sizeof(int), s));
        const int64_t want = (words + 255) / 256;
        dev::differ_kernel<<<static_cast<unsigned>(want < 4096 ? want : 4096), 256, 0, s>>>(
            buf.as<uint32_t>(), bdx.as<uint32_t>(), words, flag.as<int>());
        NG_CUDA_LAUNCHED("differ_kernel");
        int differs = 1;
        NG_CUDA(cudaMemcpyAsync(&differs, flag.get(), sizeof(int), cudaMemcpyDeviceToHost, s));
        NG_CUDA(cudaStreamSynchronize(s));
        if (differs == 0) {  // buffers are whole words (rows_bytes), every byte compared
          (*dx_source)[k] = src;
          dx_needed = false;
          break;
        }
      }
    }
    if (share && !bwd_outputs) (*dx_source)[k] = k;  // no dx at all: each is its own (empty)
    if (share && bwd_outputs) {
      if (dx_needed) {
        (*dx_source)[k] = k;
        if (T > 0 && k + 1 < bwds.size()) {  // a later variant compares its dx with it
          const detail::Region keep = mem.get(bdx.bytes());
          NG_CUDA(cudaMemcpyAsync(keep.get(), bdx.get(), bdx.bytes(), cudaMemcpyDeviceToDevice, s));
          distinct.emplace_back(k, keep);
        }
      }
    }
    if (dx_needed) download_tensor(out.dx, dx);
    // y and rstd are the one forward's outputs (device buffers untouched by
    // the backward): downloaded once; in full mode every result gets a copy.
    if (k == 0) {
      download_tensor(out.y, y);
      timed([&] { detail::download_into(out.rstd, brstd.get(), static_cast<size_t>(R), s); });
      if (res) download_tensor(out.h_new, h_new);
    } else if (!share) {
      out.y = outs[0].y;
      out.rstd = outs[0].rstd;
      out.h_new = outs[0].h_new;
    }
  }
  return outs;
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear: "no device" must not leak into later calls
    return 0;
  }
  return n;
}

void use_device(int device) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e));
  }
}

std::vector<Outputs> run_gpu(const std::vector<const Variant*>& bwds, const seeds::CaseId& c, float eps,
                             const GpuRunOptions& opt, GpuRunInfo* info) {
  if (opt.download_inputs) bad_run("download_inputs is an option of run_gpu_shared");
  return run_gpu_impl(bwds, c, eps, opt, info, nullptr);
}

std::vector<Outputs> run_gpu(const std::vector<const Variant*>& bwds, const seeds::HostInputs& in, float eps,
                             const GpuRunOptions& opt) {
  if (opt.download_inputs) bad_run("download_inputs is an option of run_gpu_shared");
  return run_gpu_impl(bwds, in.id, eps, opt, nullptr, &in);
}

SharedGpuRun run_gpu_shared(const std::vector<const Variant*>& bwds, const seeds::CaseId& c,
                            const seeds::HostInputs* in, float eps, const GpuRunOptions& opt) {
  if (in != nullptr && !(in->id == c)) bad_run("host inputs are of case " + seeds::to_string(in->id));
  if (in != nullptr && opt.download_inputs) bad_run("download_inputs with given host inputs (the caller has them)");
  SharedGpuRun r;
  RunTimes tm;
  r.outs = run_gpu_impl(bwds, c, eps, opt, nullptr, in, &r.dx_source, opt.download_inputs ? &r.inputs : nullptr, &tm);
  r.seconds_inputs = tm.inputs;
  r.seconds_generation = tm.generation;
  r.seconds_downloads = tm.downloads;
  return r;
}

Outputs run_gpu(const Variant& bwd, const seeds::CaseId& c, float eps, const GpuRunOptions& opt, GpuRunInfo* info) {
  return std::move(run_gpu(std::vector<const Variant*>{&bwd}, c, eps, opt, info).front());
}

OutputDigests run_gpu_digests(const Variant& bwd, const seeds::CaseId& c, float eps, const GpuRunOptions& opt) {
  if (opt.download_inputs) bad_run("download_inputs is an option of run_gpu_shared");
  OutputDigests d;
  run_gpu_impl({&bwd}, c, eps, opt, nullptr, nullptr, nullptr, nullptr, nullptr, &d);
  return d;
}

}  // namespace normgate::kernels
