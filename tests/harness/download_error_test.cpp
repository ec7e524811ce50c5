// tests/harness/download_error_test.cpp: download_rows (harness/src/host_download.h)
// on its error path: when the sink throws, a copy into the other staging
// buffer is still in flight; the exception must leave only after the stream
// has drained it, since the staging mutex is released with it and the next
// download would write into the same buffer. GPU only (skips without one).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "util/gpu_test_util.h"

#if defined(NORMGATE_KERNELS_HAVE_CUDA)
#include <cuda_runtime.h>

#include "host_download.h"
#endif

namespace normgate::kernels::test {
namespace {

TEST(DownloadRows, AnErrorLeavesNoCopyInFlight) {
#if !defined(NORMGATE_KERNELS_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA: download_rows is GPU code";
#else
  NG_REQUIRE_GPU();
  namespace nd = normgate::kernels::detail;
  // Three rows of one staging buffer each: when the first lands (and the
  // sink throws), the second (64 MiB, about a millisecond of DMA) is in flight.
  const size_t width = nd::kStageBytes, rows = 3;
  DevMem src(width * rows);
  ASSERT_EQ(cudaMemset(src.p, 0x5a, width * rows), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  int calls = 0;
  const nd::DownloadSink refuse = [&calls](const void*, size_t) {
    ++calls;
    throw std::runtime_error("the sink refuses its first chunk");
  };
  EXPECT_THROW(nd::download_rows(refuse, src.p, width, width, rows, s), std::runtime_error);
  EXPECT_EQ(calls, 1);
  // Nothing of the download is left on the stream when the exception is out.
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess) << "a staging copy was still in flight after the error";
  // The staging buffers are free again: a full download goes through, every byte.
  size_t got = 0;
  bool same = true;
  const nd::DownloadSink count = [&](const void* chunk, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(chunk);
    for (size_t i = 0; i < bytes; i += 4096) same = same && b[i] == 0x5a;
    got += bytes;
  };
  nd::download_rows(count, src.p, width, width, rows, s);
  EXPECT_EQ(got, width * rows);
  EXPECT_TRUE(same);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
#endif
}

}  // namespace
}  // namespace normgate::kernels::test
