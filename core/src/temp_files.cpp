// temp_files.cpp: the tracked temporary files (temp_files.h) and the signal
// handlers that remove them.
#include "normgate/core/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

// The note the handler writes to stderr: like a slot, read by the handler
// only in state 2 (complete and unchanged until set_signal_note moves it).
std::atomic<int> g_note_state{0};
char g_note[8192];
size_t g_note_len = 0;

void on_signal(int sig) {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  if (g_note_state.load(std::memory_order_acquire) == 2) {
    ssize_t n = ::write(STDERR_FILENO, g_note, g_note_len);
    (void)n;  // nothing to do about a stderr that cannot be written
  }
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

void set_signal_note(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_note_state.store(1, std::memory_order_release);
  g_note_len = std::min(text.size(), sizeof(g_note));
  std::memcpy(g_note, text.data(), g_note_len);
  if (text.size() > sizeof(g_note)) {  // cut: say so, and end the line
    constexpr char kCut[] = " [...]\n";
    std::memcpy(g_note + sizeof(g_note) - (sizeof(kCut) - 1), kCut, sizeof(kCut) - 1);
  }
  if (g_note_len > 0) g_note_state.store(2, std::memory_order_release);
  else g_note_state.store(0, std::memory_order_release);
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
