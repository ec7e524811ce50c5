// normgate/core/temp_files.h: temporary files removed when a signal ends
// the process.
//
// Every output is written to a temporary file beside it and renamed over it
// (file_target.h). A SIGINT or SIGTERM (Ctrl-C; Slurm's time limit) that
// arrives while such a file is being written would leave it behind, up to a
// whole HDF5 export in size. A writer tracks its temporary while it exists;
// the CLI installs handlers (remove_temps_on_signal) that unlink every
// tracked file and then die of the signal as before.
#pragma once

#include <string>

namespace normgate::core {

/// Track `path` (a temporary file this process is writing) until
/// untrack_temp(path). At most kMaxTrackedTemps at once; beyond that the
/// file is not tracked (returns false). Paths longer than 4095 bytes are
/// not tracked either. Thread-safe; never throws.
bool track_temp(const std::string& path);

/// Stop tracking `path` (after its rename, or its removal). Thread-safe;
/// never throws; a path not tracked is ignored.
void untrack_temp(const std::string& path);

/// How many temporary files can be tracked at once.
inline constexpr int kMaxTrackedTemps = 32;

/// The text the signal handlers of remove_temps_on_signal write to stderr
/// (write(2), async-signal-safe) after removing the temporaries and before
/// the process ends: what a long run leaves to resume from, say ("the
/// journal J keeps every finished case: the same command resumes"). At
/// most 8192 bytes are kept: a longer text is cut and ends in " [...]" and
/// a newline; "" writes nothing (the default). Thread-safe; never throws.
void set_signal_note(const std::string& text);

/// set_signal_note(text) for the scope's life, then set_signal_note("")
/// (nothing when text is ""): the note of one long step.
class SignalNoteScope {
 public:
  explicit SignalNoteScope(const std::string& text) : set_(!text.empty()) {
    if (set_) set_signal_note(text);
  }
  ~SignalNoteScope() {
    if (set_) set_signal_note("");
  }
  SignalNoteScope(const SignalNoteScope&) = delete;
  SignalNoteScope& operator=(const SignalNoteScope&) = delete;

 private:
  bool set_;
};

/// Install handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT that unlink
/// every tracked temporary file (async-signal-safe: unlink only), restore
/// the default action and raise the signal again, so the process ends as it
/// would have (exit status 128 + signal in a shell); a signal already
/// ignored (nohup) stays ignored. SIGXFSZ is ignored: a write past the
/// file-size limit then fails with EFBIG and takes its writer's error path
/// (temporary removed, the file named) instead of killing the process.
/// Idempotent. For executables only: a library leaves its host's signal
/// handling alone.
void remove_temps_on_signal();

/// RAII: track_temp(path) now, untrack_temp(path) on destruction (after the
/// writer has renamed or removed it).
class TrackedTemp {
 public:
  explicit TrackedTemp(std::string path) : path_(std::move(path)) { track_temp(path_); }
  ~TrackedTemp() { untrack_temp(path_); }
  TrackedTemp(const TrackedTemp&) = delete;
  TrackedTemp& operator=(const TrackedTemp&) = delete;

 private:
  std::string path_;
};

}  // namespace normgate::core
