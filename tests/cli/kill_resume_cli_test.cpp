// tests/cli: a gate with --journal killed with SIGKILL at several points
// chosen by a seeded generator (fixed seed: the same points every run), each
// time resumed from the journal and killed again, until a run ends: the
// reports equal an uninterrupted run's but the date, every case is in the
// journal once, and nothing a killed run recorded is lost.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"

namespace {

using normgate::test::CliRun;
using normgate::test::contains;
namespace fs = std::filesystem;

const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

std::string without_dates(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!contains(line, "- date: ") && !contains(line, "\"date\":")) out += line + "\n";
  return out;
}

std::vector<std::string> gate_args(const std::string& journal, const std::string& prefix) {
  return {normgate::test::normgate_bin(), "gate", kSmall, "--backend", "cpu", "--threads", "1", "--seeds", "3x1",
          "--t-per-window", "4", "--dense-points", "2", "--quiet", "--journal", journal, "--report-md",
          prefix + ".md", "--report-json", prefix + ".json"};
}

// The gate in a child process, its output appended to `log`.
pid_t spawn(std::vector<std::string> args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(out, 1);
    ::dup2(out, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST(KillResumeCli, KilledAtSeededPointsAndResumedGivesTheUninterruptedReport) {
  const fs::path d = fs::path(NORMGATE_BINARY_DIR) / ("kill_resume_cli_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  // The uninterrupted run, with its own journal: how many records a campaign has.
  {
    const pid_t pid = spawn(gate_args((d / "ref.jsonl").string(), (d / "ref").string()), (d / "log").string());
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  const int records = lines(slurp(d / "ref.jsonl")) - 1;
  ASSERT_GT(records, 20);

  // Kill points: a record count to wait for (0: the header, or before it),
  // then a further delay of 0..3 ms, so kills land inside a record's write,
  // between records and before the header too. Fixed seed: reproducible.
  std::mt19937 rng(35);
  std::vector<int> at;
  for (int k = 0; k < 5; ++k) at.push_back(static_cast<int>(rng() % static_cast<unsigned>(records)));
  std::sort(at.begin(), at.end());
  at.front() = 0;  // one kill right at the start
  const std::string journal = (d / "j.jsonl").string();
  int kills = 0, previous_records = 0;
  for (const int wait_for : at) {
    const pid_t pid = spawn(gate_args(journal, (d / "b").string()), (d / "log").string());
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(journal) && lines(slurp(journal)) - 1 >= wait_for) break;
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) break;  // ended on its own (waited for below)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    const bool killed = ::kill(pid, SIGKILL) == 0;
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (killed && WIFSIGNALED(st)) {
      ++kills;
      EXPECT_FALSE(fs::exists(d / "b.md")) << "a killed run wrote its report";
    }
    // Nothing recorded before is lost: whole records only grow.
    const std::string j = slurp(journal);
    const int now = std::max(0, lines(j) - 1);
    EXPECT_GE(now, previous_records) << "records lost after kill point " << wait_for;
    previous_records = now;
  }
  EXPECT_GE(kills, 4) << "too few runs were killed: the points are too late";
  // The last resume runs to the end.
  const pid_t pid = spawn(gate_args(journal, (d / "b").string()), (d / "log").string());
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "the final resume did not exit";
  ASSERT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(without_dates(slurp(d / "b.md")), without_dates(slurp(d / "ref.md")));
  EXPECT_EQ(without_dates(slurp(d / "b.json")), without_dates(slurp(d / "ref.json")));
  EXPECT_NE(slurp(d / "ref.md").find("- date: "), std::string::npos);
  // Every case once: as many records as the uninterrupted journal.
  EXPECT_EQ(lines(slurp(journal)) - 1, records);
  std::istringstream in(slurp(journal));
  std::string line;
  std::set<std::string> distinct;
  std::getline(in, line);  // header
  while (std::getline(in, line)) distinct.insert(line);
  EXPECT_EQ(static_cast<int>(distinct.size()), records);
  fs::remove_all(d);
}

}  // namespace

// SIGTERM (a job's time limit) or SIGINT (Ctrl-C) mid-run: the gate ends by
// the signal, as before, and says on stderr what the journal keeps and that
// the same command resumes; the resume then finishes the campaign. A gate
// without --journal says that nothing is kept.
TEST(KillResumeCli, SignalledGateSaysTheSameCommandResumes) {
  const fs::path d = fs::path(NORMGATE_BINARY_DIR) / ("signal_note_cli_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  const std::string journal = (d / "j.jsonl").string();
  for (const int sig : {SIGTERM, SIGINT}) {
    fs::remove(journal);
    const std::string log = (d / ("log" + std::to_string(sig))).string();
    // A wrapper names its own resume command (scripts/main does).
    const std::string wrapper = "NORMGATE_RESUME=1 scripts/main --seeds 3x1";
    if (sig == SIGINT) ::setenv("NORMGATE_RESUME_COMMAND", wrapper.c_str(), 1);
    const pid_t pid = spawn(gate_args(journal, (d / "b").string()), log);
    ::unsetenv("NORMGATE_RESUME_COMMAND");
    ASSERT_GT(pid, 0);
    // Past the header and a few records: the run is under way.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline &&
           !(fs::exists(journal) && lines(slurp(journal)) - 1 >= 3))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_EQ(::kill(pid, sig), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st)) << "signal " << sig << ": the gate finished before it was signalled";
    EXPECT_EQ(WTERMSIG(st), sig);
    const std::string out = slurp(log);
    EXPECT_TRUE(contains(out, "stopped by a signal; run " +
                                  (sig == SIGINT ? wrapper : std::string("the same command again")) +
                                  " to resume: every case finished before it is in the journal '" + journal + "'"))
        << out;
    EXPECT_FALSE(fs::exists(d / "b.md"));
  }
  // The resume finishes; its own output has no such note.
  const std::string log = (d / "resume.log").string();
  const pid_t pid = spawn(gate_args(journal, (d / "b").string()), log);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(log);
  EXPECT_FALSE(contains(slurp(log), "stopped by a signal"));
  EXPECT_TRUE(fs::exists(d / "b.md"));
  // Without --journal: killed, and said that nothing is kept.
  {
    const std::string nlog = (d / "nojournal.log").string();
    std::vector<std::string> args = {normgate::test::normgate_bin(), "gate", kSmall, "--backend", "cpu",
                                     "--threads", "1", "--seeds", "3x1", "--t-per-window", "4"};
    const pid_t p = spawn(args, nlog);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(::kill(p, SIGTERM), 0);
    int s2 = 0;
    ASSERT_EQ(::waitpid(p, &s2, 0), p);
    if (WIFSIGNALED(s2))
      EXPECT_TRUE(contains(slurp(nlog), "stopped by a signal; without --journal nothing of this run is kept"))
          << slurp(nlog);
  }
  fs::remove_all(d);
}
