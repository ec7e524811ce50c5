// tests/core/host_memory_test.cpp: core::host_memory reads the tightest
// memory limit of the process's cgroups (v2 and v1 layouts, ancestors,
// "max" and v1's no-limit value), on a made-up cgroup tree.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "normgate/core/host_memory.h"

namespace {

namespace fs = std::filesystem;

class HostMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    root = (fs::temp_directory_path() / ("ng_cgroup_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(root);
    fs::create_directories(root);
  }
  void TearDown() override { fs::remove_all(root); }
  void put(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(root) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root;
};

TEST_F(HostMemory, V2TakesTheTightestLimitOfTheCgroupAndItsAncestors) {
  put("self", "0::/a/b\n");
  put("cg/memory.max", "max\n");
  put("cg/a/memory.max", "8589934592\n");  // 8 GiB on the parent
  put("cg/a/b/memory.max", "max\n");       // none on the process's own
  const auto m = normgate::core::host_memory(root + "/cg", root + "/self");
  EXPECT_EQ(m.cgroup_limit, 8589934592u);
  EXPECT_EQ(m.cgroup_file, root + "/cg/a/memory.max");
  EXPECT_GT(m.physical, 0u);
  EXPECT_EQ(m.usable(), std::min<uint64_t>(m.physical, 8589934592u));
}

TEST_F(HostMemory, V1ReadsTheMemoryControllersHierarchy) {
  put("self", "5:cpu,cpuacct:/x\n4:memory:/svc/job\n0::/\n");
  put("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  put("cg/memory/svc/job/memory.limit_in_bytes", "1073741824\n");
  put("cg/memory/svc/memory.limit_in_bytes", "2147483648\n");
  put("cg/x/memory.max", "1024\n");  // not the memory controller's path: ignored
  const auto m = normgate::core::host_memory(root + "/cg", root + "/self");
  EXPECT_EQ(m.cgroup_limit, 1073741824u);
  EXPECT_EQ(m.cgroup_file, root + "/cg/memory/svc/job/memory.limit_in_bytes");
}

TEST_F(HostMemory, TheMountsOwnLimitCountsWhenThePathIsNotUnderIt) {
  // A container whose namespace shows its cgroup as the mount's root, while
  // /proc/self/cgroup names a path that does not exist there.
  put("self", "0::/outside/path\n");
  put("cg/memory.max", "3221225472\n");
  const auto m = normgate::core::host_memory(root + "/cg", root + "/self");
  EXPECT_EQ(m.cgroup_limit, 3221225472u);
}

TEST_F(HostMemory, NoCgroupFilesMeansNoLimit) {
  put("cg/memory.max", "garbage\n");  // unreadable as a number: skipped
  const auto m = normgate::core::host_memory(root + "/cg", root + "/missing");
  EXPECT_EQ(m.cgroup_limit, 0u);
  EXPECT_EQ(m.cgroup_file, "");
  EXPECT_EQ(m.usable(), m.physical);
}

TEST_F(HostMemory, PathsOutsideTheMountAndFilesThatAreNotRegularAreSkipped) {
  put("self", "0::/../esc\n4:memory:/a/./b\n");
  put("esc/memory.max", "4242\n");                 // ROOT/../esc: outside the mount
  put("cg/memory/a/b/memory.limit_in_bytes", "77\n");  // reached only through "/./"
  fs::create_directories(root + "/cg/memory/a/b");
  ASSERT_EQ(::mkfifo((root + "/cg/memory.max").c_str(), 0600), 0);  // would block a plain read
  const auto m = normgate::core::host_memory(root + "/cg", root + "/self");
  EXPECT_EQ(m.cgroup_limit, 0u) << m.cgroup_file;
}

}  // namespace

// keep_large_blocks: glibc's defaults serve a 64 MiB block by mmap() (above
// the largest dynamic mmap threshold, 32 MiB), so it would be faulted in
// again by every case; once the kept heap is on, the same block comes from
// the heap. NORMGATE_MALLOC_DEFAULTS=1 leaves the defaults. One test, in
// this order: the settings are process-wide and cannot be undone.
// The address-space limit (ulimit -v) bounds what may be allocated as the
// host's memory does: usable() is the least of the three known bounds.
TEST(HostMemoryUsable, TheLeastKnownBoundOfPhysicalCgroupAndAddressSpace) {
  normgate::core::HostMemory m;
  EXPECT_EQ(m.usable(), 0u);  // nothing known
  m.physical = 64ull << 30;
  EXPECT_EQ(m.usable(), 64ull << 30);
  m.address_limit = 4ull << 30;
  EXPECT_EQ(m.usable(), 4ull << 30);
  m.cgroup_limit = 2ull << 30;
  EXPECT_EQ(m.usable(), 2ull << 30);
  m.physical = 0;
  m.cgroup_limit = 0;
  EXPECT_EQ(m.usable(), 4ull << 30);  // the address-space limit alone
  // Only what the process does not use yet of it can be allocated.
  m.address_used = 1ull << 30;
  EXPECT_EQ(m.usable(), 3ull << 30);
  m.physical = 2ull << 30;
  EXPECT_EQ(m.usable(), 2ull << 30);  // the tighter bound wins
  m.physical = 0;
  m.address_used = 5ull << 30;  // all of it in use: 1 byte left, not 0 ("unknown")
  EXPECT_EQ(m.usable(), 1u);
  // ... and the message names the limit, not "this host's 0.0 GiB".
  EXPECT_EQ(m.describe_usable(),
            "this process's address-space limit (ulimit -v) of 4.0 GiB (4294967296 bytes), of which 0.0 GiB (1 "
            "bytes) is left (5.0 GiB (5368709120 bytes) in use)");
  m.address_used = 0;  // statm unreadable
  EXPECT_EQ(m.describe_usable(),
            "this process's address-space limit (ulimit -v) of 4.0 GiB (4294967296 bytes), of which 4.0 GiB "
            "(4294967296 bytes) is left (in use unknown)");
  m.cgroup_limit = 3ull << 30;
  m.cgroup_file = "/sys/fs/cgroup/x/memory.max";
  EXPECT_EQ(m.describe_usable(), "this process's cgroup limit of 3.0 GiB (3221225472 bytes) (/sys/fs/cgroup/x/memory.max)");
  m.cgroup_limit = 0;
  m.address_used = 5ull << 30;
  m.address_limit = 0;
  EXPECT_EQ(m.usable(), 0u);  // no limit: the address space in use bounds nothing
  // This process's own limit is read (none set: 0).
  struct rlimit rl {};
  ASSERT_EQ(::getrlimit(RLIMIT_AS, &rl), 0);
  const auto h = normgate::core::host_memory();
  EXPECT_EQ(h.address_limit, rl.rlim_cur == RLIM_INFINITY ? 0u : static_cast<uint64_t>(rl.rlim_cur));
  // The address space in use: at least this test's code and a live 64 MiB block.
  std::vector<char> block(size_t{64} << 20, 1);
  const auto h2 = normgate::core::host_memory();
  EXPECT_GE(h2.address_used, block.size()) << "from /proc/self/statm";
}

TEST(KeepLargeBlocks, LargeBlocksComeFromTheHeapUnlessDefaultsAreAsked) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  constexpr size_t kBig = size_t{64} << 20;
  const auto mmapped_by = [](size_t bytes) {  // bytes more in mmapped chunks while a block is held
    const size_t before = mallinfo2().hblkhd;
    void* p = std::malloc(bytes);
    const size_t during = mallinfo2().hblkhd;
    std::free(p);
    return p == nullptr ? size_t{0} : during - before;
  };
  ASSERT_EQ(setenv("NORMGATE_MALLOC_DEFAULTS", "1", 1), 0);
  EXPECT_FALSE(normgate::core::keep_large_blocks());
  EXPECT_GE(mmapped_by(kBig), kBig) << "glibc's defaults should mmap a 64 MiB block";
  ASSERT_EQ(unsetenv("NORMGATE_MALLOC_DEFAULTS"), 0);
  EXPECT_TRUE(normgate::core::keep_large_blocks());
  EXPECT_EQ(mmapped_by(kBig), 0u) << "with the kept heap a 64 MiB block comes from the heap";
#else
  GTEST_SKIP() << "needs glibc 2.33 or later (mallinfo2)";
#endif
}

// OpenMP's stack sizes: kilobytes without a suffix, B/K/M/G in any case,
// spaces around; anything else is 0 (then RLIMIT_STACK decides).
TEST(ThreadStacks, StackSizeTextInBytes) {
  using normgate::core::stack_size_text_bytes;
  EXPECT_EQ(stack_size_text_bytes("4096"), 4096u * 1024u);
  EXPECT_EQ(stack_size_text_bytes("512K"), 512u * 1024u);
  EXPECT_EQ(stack_size_text_bytes(" 8 m "), 8u << 20);
  EXPECT_EQ(stack_size_text_bytes("1G"), uint64_t{1} << 30);
  EXPECT_EQ(stack_size_text_bytes("100b"), 100u);
  EXPECT_EQ(stack_size_text_bytes(nullptr), 0u);
  EXPECT_EQ(stack_size_text_bytes(""), 0u);
  EXPECT_EQ(stack_size_text_bytes("8MB"), 0u);
  EXPECT_EQ(stack_size_text_bytes("-8M"), 0u);
  EXPECT_EQ(stack_size_text_bytes("M"), 0u);
  EXPECT_EQ(stack_size_text_bytes("9999999999999999K"), 0u);  // more than 15 digits
}

// The stacks of hardware_concurrency() - 1 workers, at OMP_STACKSIZE when it
// is set, however large (a 2 GiB stack under ulimit -v made libgomp exit 1).
TEST(ThreadStacks, WorkersTimesOneStack) {
  const unsigned hw = std::thread::hardware_concurrency();
  const uint64_t workers = hw > 1 ? hw - 1 : 0;
  const char* was = std::getenv("OMP_STACKSIZE");
  const std::string keep = was ? was : "";
  ::setenv("OMP_STACKSIZE", "3M", 1);
  EXPECT_EQ(normgate::core::thread_stacks_bytes(), workers * (uint64_t{3} << 20));
  ::setenv("OMP_STACKSIZE", "2G", 1);
  EXPECT_EQ(normgate::core::thread_stacks_bytes(), workers * (uint64_t{2} << 30));
  if (was) ::setenv("OMP_STACKSIZE", keep.c_str(), 1);
  else ::unsetenv("OMP_STACKSIZE");
}
