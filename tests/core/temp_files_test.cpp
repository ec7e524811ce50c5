// tests/core/temp_files_test.cpp: temporary files tracked while they are
// written are removed when SIGINT, SIGTERM, SIGHUP or SIGQUIT ends the process, which
// still dies of the signal; untracked and released files stay. Each case
// runs in a forked child (the handlers are process-wide).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "normgate/core/file_target.h"
#include "normgate/core/temp_files.h"

namespace {

namespace fs = std::filesystem;
using normgate::core::TrackedTemp;

std::string dir_for(const std::string& name) {
  const std::string d = ::testing::TempDir() + "temp_files_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void touch(const std::string& p) { std::ofstream(p) << "partial"; }

// The child: handlers, three files (tracked, untracked, tracked then
// released), then the signal. Returns the child's wait status.
int child_dies_of(int sig, const std::string& d) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    normgate::core::remove_temps_on_signal();
    touch(d + "/tracked.tmp");
    touch(d + "/untracked.tmp");
    touch(d + "/released.tmp");
    normgate::core::track_temp(d + "/tracked.tmp");
    { const TrackedTemp released(d + "/released.tmp"); }
    ::raise(sig);
    ::_exit(0);  // not reached: the signal ends the child
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(TempFiles, ASignalRemovesTrackedTemporariesAndStillEndsTheProcess) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    const std::string d = dir_for(std::to_string(sig));
    const int status = child_dies_of(sig, d);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig << ", status " << status;
    EXPECT_FALSE(fs::exists(d + "/tracked.tmp")) << "signal " << sig;
    EXPECT_TRUE(fs::exists(d + "/untracked.tmp")) << "signal " << sig;
    EXPECT_TRUE(fs::exists(d + "/released.tmp")) << "signal " << sig;
    fs::remove_all(d);
  }
}

// SIGXFSZ is ignored once the handlers are in (a write past ulimit -f fails
// with EFBIG), and a signal the parent ignored stays ignored.
TEST(TempFiles, FileSizeSignalIgnoredAndIgnoredSignalsStayIgnored) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGHUP, SIG_IGN);  // as nohup
    normgate::core::remove_temps_on_signal();
    struct sigaction xfsz {}, hup {}, term {};
    ::sigaction(SIGXFSZ, nullptr, &xfsz);
    ::sigaction(SIGHUP, nullptr, &hup);
    ::sigaction(SIGTERM, nullptr, &term);
    const bool ok = xfsz.sa_handler == SIG_IGN && hup.sa_handler == SIG_IGN && term.sa_handler != SIG_IGN &&
                    term.sa_handler != SIG_DFL;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(TempFiles, TrackingIsBoundedAndUntrackIgnoresStrangers) {
  // kMaxTrackedTemps at once; the next is refused (not tracked), and a slot
  // freed by untrack_temp is used again.
  std::vector<std::string> names;
  for (int i = 0; i < normgate::core::kMaxTrackedTemps; ++i) {
    names.push_back("/nonexistent/t" + std::to_string(i));
    EXPECT_TRUE(normgate::core::track_temp(names.back())) << i;
  }
  EXPECT_FALSE(normgate::core::track_temp("/nonexistent/one-too-many"));
  normgate::core::untrack_temp("/nonexistent/never-tracked");
  EXPECT_FALSE(normgate::core::track_temp("/nonexistent/still-full"));
  normgate::core::untrack_temp(names[5]);
  EXPECT_TRUE(normgate::core::track_temp("/nonexistent/reused"));
  normgate::core::untrack_temp("/nonexistent/reused");
  for (const auto& n : names) normgate::core::untrack_temp(n);
  EXPECT_FALSE(normgate::core::track_temp(""));
  EXPECT_FALSE(normgate::core::track_temp(std::string(5000, 'a')));
}

}  // namespace

// link_chain: every step of a chain of links (relative targets resolved
// against the link's folder), the path alone when it is no link, nothing
// for a loop; rename_target is the chain's end.
TEST(FileTarget, LinkChainListsEveryStepAndRenameTargetItsEnd) {
  const std::string d = ::testing::TempDir() + "file_target_" + std::to_string(::getpid());
  fs::remove_all(d);
  fs::create_directories(d + "/sub");
  std::ofstream(d + "/sub/real.json") << "x";
  fs::create_symlink("sub/real.json", d + "/b.json");  // relative to d
  fs::create_symlink(d + "/b.json", d + "/a.json");
  const std::vector<std::string> chain = normgate::core::link_chain(d + "/a.json");
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0], d + "/a.json");
  EXPECT_EQ(chain[1], d + "/b.json");
  EXPECT_EQ(fs::path(chain[2]).lexically_normal().string(), d + "/sub/real.json");
  EXPECT_EQ(normgate::core::rename_target(d + "/a.json"), fs::weakly_canonical(d + "/sub/real.json").string());
  EXPECT_EQ(normgate::core::link_chain(d + "/sub/real.json"), std::vector<std::string>{d + "/sub/real.json"});
  fs::create_symlink(d + "/loop2", d + "/loop1");
  fs::create_symlink(d + "/loop1", d + "/loop2");
  EXPECT_TRUE(normgate::core::link_chain(d + "/loop1").empty());
  EXPECT_EQ(normgate::core::rename_target(d + "/loop1"), d + "/loop1");
  EXPECT_TRUE(normgate::core::link_chain("").empty());
  fs::remove_all(d);
}

// temp_name_beside: a name of its own for every call, in every thread (two
// writers of one file in one process once shared "PATH.tmp.PID", and one
// could rename the other's half-written bytes onto PATH).
TEST(FileTarget, TempNamesBesideOneFileAreNeverShared) {
  const std::string target = "/some/folder/report.json";
  const std::string prefix = target + ".tmp." + std::to_string(::getpid()) + ".";
  constexpr int kThreads = 8, kCalls = 500;
  std::vector<std::vector<std::string>> names(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) names[t].push_back(normgate::core::temp_name_beside(target));
    });
  for (auto& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : names)
    for (const auto& n : v) {
      EXPECT_EQ(n.rfind(prefix, 0), 0u) << n;
      const std::string count = n.substr(prefix.size());
      EXPECT_FALSE(count.empty());
      EXPECT_EQ(count.find_first_not_of("0123456789"), std::string::npos) << n;
      all.insert(n);
    }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kCalls));
  const std::string old = normgate::core::temp_name_beside(target, "old");
  EXPECT_EQ(old.rfind(target + ".old." + std::to_string(::getpid()) + ".", 0), 0u) << old;
}
