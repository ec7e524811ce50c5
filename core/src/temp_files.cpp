// temp_files.cpp: the tracked temporary files (temp_files.h) and the signal
// handlers that remove them.
#include "normgate/core/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace normgate::core {
namespace {

// A slot: state 0 free, 1 being filled or emptied, 2 holds a path the
// handler may unlink. The handler reads only slots in state 2, whose path
// is complete and stays unchanged until untrack_temp moves it to 1.
struct Slot {
  std::atomic<int> state{0};
  char path[4096];
};
Slot g_slots[kMaxTrackedTemps];
std::mutex g_mu;  // serializes track/untrack (not the handler)

void on_signal(int sig) {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  // SA_RESETHAND restored the default action; end as the signal would have.
  ::raise(sig);
}

}  // namespace

bool track_temp(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(Slot::path)) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_relaxed) != 0) continue;
    s.state.store(1, std::memory_order_relaxed);
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(2, std::memory_order_release);
    return true;
  }
  return false;
}

void untrack_temp(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_relaxed) == 2 && path == s.path) {
      s.state.store(1, std::memory_order_release);
      s.state.store(0, std::memory_order_release);
      return;
    }
}

void remove_temps_on_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      struct sigaction old {};
      // A signal the caller's parent set to be ignored (nohup) stays ignored.
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      ::sigaction(sig, &sa, nullptr);
    }
    // A write past the file-size limit (ulimit -f) fails with EFBIG instead
    // of killing the process: the writer's own error path removes its
    // temporary and says which file could not be written.
    ::signal(SIGXFSZ, SIG_IGN);
  });
}

}  // namespace normgate::core
