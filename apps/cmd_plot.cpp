// apps/cmd_plot.cpp: normgate plot FILE: pictures of a case or maps file and an index.html, by
// plot_maps.py beside the binary.
#include "commands.h"

#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/audit/case_file.h"

namespace normgate::app {

namespace {

// Run argv with stdout/stderr discarded; its exit status, or -1.
int run_quiet(std::vector<std::string> args) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// The plot child's pid while normgate waits for it, and the signal that
// came meanwhile (0: none). SIGINT, SIGTERM, SIGHUP and SIGQUIT are passed
// on to the child and waited for: a scheduler's `kill PID` ended normgate at
// once and left the script writing pictures after it.
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_signal = 0;

void forward_to_child(int sig) {
  g_signal = sig;
  if (g_child > 0) ::kill(static_cast<pid_t>(g_child), sig);
}

}  // namespace

void add_plot(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand(
      "plot", "PNG pictures of a case or maps file and OUTPUT/index.html (plot_maps.py beside the binary: python3 with h5py, "
              "numpy, matplotlib): per case the outputs its window gates (forward: y tile heatmap, rstd per row; "
              "backward: dx tile heatmap, dw per column) and their err/tol histograms; the index lists the windows "
              "in the report's order, verdict first, with their pictures");
  struct Opts {
    std::string file, out, report;
    int dpi = 0;
  };
  auto o = std::make_shared<Opts>();
  sub->add_option("file", o->file, "HDF5 file (normgate-case/2 or normgate-maps/2)")->required();
  sub->add_option("-o,--output", o->out, "Folder for the PNGs and index.html (created if missing)")->required();
  sub->add_option("--dpi", o->dpi, "Resolution (default: the script's)")->check(CLI::Range(20, 1200));
  sub->add_option("--report", o->report,
                  "Gate report the maps were exported from, for the index's window order and verdicts (default: "
                  "the file's recorded source, when it is there and matches)");
  sub->callback([&cmds, o] {
    cmds.run = [o] {
      // The output folder, before any work: an existing writable folder, or
      // one the script can create (under a writable folder); an existing
      // file (the input file given twice, say) is refused.
      {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (fs::exists(o->out, ec)) {
          if (!fs::is_directory(o->out, ec))
            throw std::invalid_argument("--output '" + o->out + "' exists and is not a folder");
          if (::access(o->out.c_str(), W_OK) != 0)
            throw std::invalid_argument("--output '" + o->out + "': the folder is not writable");
        } else {  // created with its parents: the nearest existing one must be a writable folder
          fs::path up = fs::absolute(o->out, ec).parent_path();
          while (!up.empty() && !fs::exists(up, ec) && up != up.parent_path()) up = up.parent_path();
          if (!fs::is_directory(up, ec) || ::access(up.c_str(), W_OK) != 0)
            throw std::invalid_argument("--output '" + o->out + "': cannot create it: '" + up.string() +
                                        "' is not a writable folder");
        }
      }
      // The script reads only the maps: check the whole file first, as inspect
      // does (every dataset's Fletcher-32 checksum, a case's inputs digest), so
      // a corrupted file is refused (exit 2, file and dataset named), not drawn.
      try {
        (void)validators::inspect_file(o->file);
      } catch (const std::runtime_error& e) {  // a bad file is bad input (exit 2), as in inspect
        throw std::invalid_argument(e.what());
      }
      const char* script_env = std::getenv("NORMGATE_PLOT_SCRIPT");
      // The script is installed beside this binary (audit/plot_maps.py; apps/CMakeLists.txt
      // copies it into the build folder and installs it next to normgate).
      const std::string script =
          script_env ? script_env
                     : (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "plot_maps.py").string();
      // $PYTHON, else the first of python3 and /usr/bin/python3 (Debian's
      // python3-h5py and python3-matplotlib, scripts/bootstrap) that imports them.
      const char* py_env = std::getenv("PYTHON");
      std::string py = py_env ? py_env : "";
      if (py.empty()) {
        for (const char* cand : {"python3", "/usr/bin/python3"})
          if (run_quiet({cand, "-c", "import h5py, matplotlib, numpy"}) == 0) {
            py = cand;
            break;
          }
        if (py.empty())
          throw std::invalid_argument("no python3 with h5py, numpy and matplotlib found (scripts/bootstrap installs "
                                      "them; or set PYTHON=/path/to/python)");
      }
      if (!std::filesystem::is_regular_file(script))
        throw std::invalid_argument("plot script '" + script + "' not found (set NORMGATE_PLOT_SCRIPT)");
      std::vector<std::string> args = {py, script, o->file, "-o", o->out};
      if (o->dpi > 0) args.insert(args.end(), {"--dpi", std::to_string(o->dpi)});
      if (!o->report.empty()) args.insert(args.end(), {"--report", o->report});
      std::fflush(stdout);
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("plot: fork failed");
      if (pid == 0) {
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execvp(argv[0], argv.data());
        std::fprintf(stderr, "normgate: error: cannot run '%s' (set PYTHON)\n", py.c_str());
        ::_exit(2);
      }
      g_child = pid;
      struct sigaction fw {}, old_sa[4];
      fw.sa_handler = forward_to_child;
      sigemptyset(&fw.sa_mask);
      const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
      for (int k = 0; k < 4; ++k) {
        ::sigaction(sigs[k], nullptr, &old_sa[k]);
        if (old_sa[k].sa_handler != SIG_IGN) ::sigaction(sigs[k], &fw, nullptr);  // nohup's stay ignored
      }
      int status = 0;
      pid_t got = -1;
      while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
      }
      g_child = 0;
      for (int k = 0; k < 4; ++k) ::sigaction(sigs[k], &old_sa[k], nullptr);
      if (got < 0) throw std::runtime_error("plot: waitpid failed");
      // Interrupted: the script cleaned up after itself (or was killed);
      // normgate ends by the same signal, through its own handlers (which
      // remove any temporary file of its own).
      if (g_signal != 0) {
        ::raise(g_signal);
        return 128 + g_signal;
      }
      if (!WIFEXITED(status))
        throw std::runtime_error("plot: " + script + " was killed by signal " + std::to_string(WTERMSIG(status)));
      const int rc = WEXITSTATUS(status);  // 0 ok, 2 bad input, 3 a write failed (the script names it)
      if (rc == 0 && !std::filesystem::is_regular_file(std::filesystem::path(o->out) / "index.html"))
        throw std::runtime_error("plot: '" + py + " " + script + "' exited 0 but wrote no " + o->out +
                                 "/index.html");
      // Any other status is the script failing (a Python traceback is 1),
      // not a verdict: a runtime failure, exit 3.
      if (rc != 0 && rc != 2 && rc != 3)
        throw std::runtime_error("plot: '" + py + " " + script + "' exited with status " + std::to_string(rc));
      return rc;
    };
  });
}

}  // namespace normgate::app
