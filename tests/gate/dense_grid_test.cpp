// tests/gate/dense_grid_test.cpp: the dense grid at the limits of its
// options (run_gate called directly, as derive and the C++ API do):
// dense_points = INT_MAX ended only by overflow (an int loop to INT_MAX) and
// dense_step near INT64_MAX overflowed k * step, putting dense T two rows
// from the worst T. Since the library checks the CLI's ranges itself
// (kMaxCampaignCount, seeds::kMaxT), those values are refused; the largest
// accepted ones end and keep every dense T inside the window.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <algorithm>
#include <vector>

#include "normgate/gate/gate.h"
#include "normgate/seeds/case_id.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate::validators;

// The H = 256 window of small.toml (T = 1..300), CPU models, one seed per family.
GateOptions one_window(int dense_points, int64_t dense_step) {
  GateOptions o = normgate::test::grid_only_opts();
  o.windows = "H=256";
  o.dense_points = dense_points;
  o.dense_step = dense_step;
  return o;
}

// run_gate in a child process, its window's dense T (and center) sent back
// through a pipe; a child still running after `seconds` is killed and the
// test fails (a hang must not stall the suite).
struct Dense {
  bool finished = false;
  int64_t center = 0;
  std::vector<int64_t> t;
};

Dense dense_of(const GateOptions& o, int seconds) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const GateResult r = run_gate(o);
    std::vector<int64_t> out = {r.windows.at(0).dense_center};
    out.insert(out.end(), r.windows.at(0).dense.t.begin(), r.windows.at(0).dense.t.end());
    const size_t n = out.size() * sizeof(int64_t);
    const ssize_t w = ::write(fds[1], out.data(), n);
    ::_exit(w == static_cast<ssize_t>(n) ? 0 : 1);
  }
  ::close(fds[1]);
  Dense d;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int st = 0;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      ::close(fds[0]);
      return d;  // not finished
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<int64_t> in(4096);
  const ssize_t got = ::read(fds[0], in.data(), in.size() * sizeof(int64_t));
  ::close(fds[0]);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got < static_cast<ssize_t>(sizeof(int64_t))) return d;
  d.finished = true;
  d.center = in[0];
  d.t.assign(in.begin() + 1, in.begin() + got / static_cast<ssize_t>(sizeof(int64_t)));
  return d;
}

TEST(GateDenseGrid, OutOfRangeCountsAreRefusedBeforeAnyWork) {
  for (const auto& [o, words] :
       {std::pair{one_window(INT_MAX, 64), std::string("--dense-points 2147483647 > 1048576")},
        std::pair{one_window(2, INT64_MAX), std::string("--dense-step 9223372036854775807 > 2147483648")}}) {
    try {
      (void)run_gate(o);
      ADD_FAILURE() << "no refusal: " << words;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

TEST(GateDenseGrid, MostPointsEndAndKeepEveryStepInsideTheWindow) {
  const Dense d = dense_of(one_window(kMaxCampaignCount, 64), 60);
  ASSERT_TRUE(d.finished) << "run_gate with dense_points = kMaxCampaignCount did not end within 60 s";
  ASSERT_GE(d.center, 1);
  // Exactly the T = center + k * 64 (k != 0) inside 1..300 that are not
  // grid T, in run order (k from -kmax up).
  const std::vector<int64_t> grid = window_t_points(1, 300, one_window(0, 64).t_per_window);
  std::vector<int64_t> want;
  for (int64_t t = d.center - (d.center - 1) / 64 * 64; t <= 300; t += 64)
    if (t != d.center && !std::binary_search(grid.begin(), grid.end(), t)) want.push_back(t);
  EXPECT_EQ(d.t, want);
}

// A dense step that lands on grid T: those T ran every case already (the
// grid runs each family and seed there) and are not dense points again;
// every other T of the steps is.
TEST(GateDenseGrid, GridTAreNotDensePointsAgain) {
  const Dense d = dense_of(one_window(300, 1), 120);
  ASSERT_TRUE(d.finished);
  const std::vector<int64_t> grid = window_t_points(1, 300, one_window(0, 1).t_per_window);
  ASSERT_TRUE(std::binary_search(grid.begin(), grid.end(), d.center)) << d.center;
  std::vector<int64_t> want;
  for (int64_t t = 1; t <= 300; ++t)
    if (!std::binary_search(grid.begin(), grid.end(), t)) want.push_back(t);
  EXPECT_EQ(d.t, want);
  EXPECT_EQ(d.t.size() + grid.size(), 300u);  // every T of the window: the grid's or a dense one
}

TEST(GateDenseGrid, TheLargestStepLandsNowhere) {
  const Dense d = dense_of(one_window(kMaxCampaignCount, normgate::seeds::kMaxT), 60);
  ASSERT_TRUE(d.finished);
  ASSERT_GE(d.center, 1);
  // No step of 2^31 rows lands inside T = 1..300 (2^20 of them: no product
  // overflows; near INT64_MAX, 2 * step wrapped to -2 and put T = center -+ 2
  // into the grid).
  EXPECT_TRUE(d.t.empty()) << "dense T " << (d.t.empty() ? 0 : d.t.front()) << " around " << d.center;
}

}  // namespace
