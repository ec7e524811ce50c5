// normgate: the command-line front end. Thin by design: every subcommand parses
// its arguments, calls one library function and prints its result.
// Exit codes: 0 success / pass, 1 a check or gate failed, 2 usage or input error.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "normgate/core/host_memory.h"
#include "normgate/core/printable.h"
#include "normgate/core/shell_quote.h"
#include "normgate/core/temp_files.h"
#include "normgate_version.h"

namespace {

// Levenshtein distance of two option names (short: no need for speed).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// For CLI11's "arguments were not expected" (which lists the stray values
// before the option): among the tokens CLI11 left over (App::remaining of
// the app and its subcommand), the first "--name" or "-x" that the subcommand argv[1]
// does not know, with the closest of its long options: the same name in
// another case ("--t" -> "--T"), the options it begins (all of them, when
// several), else those within 2 edits. --help and --version are never
// suggested. When none is and a stray token is empty, every stray token is
// listed quoted, as the whole message (CLI11's list shows an empty token as
// nothing). Empty text when no listed token is an unknown option or empty.
struct ExtrasMessage {
  std::string text;
  bool whole = false;  ///< replaces CLI11's message instead of preceding it
};
// CLI11's message for an option given more often than it takes values
// ("--seeds: At Most 1 required but received 2") names neither the values
// nor which would count: the option with every name it was given under and
// the values of each occurrence, in order. "" when `what` is not that
// message or the option is not one of the subcommand run.
std::string repeated_option_message(CLI::App& app, const std::string& what, int argc, char** argv) {
  const std::string tag = ": At Most ";
  const size_t at = what.find(tag);
  if (at == std::string::npos || what.rfind("--", 0) != 0) return "";
  const std::string name = what.substr(0, at);
  size_t per = 0;  // values an occurrence takes
  try {
    per = std::stoul(what.substr(at + tag.size()));
  } catch (const std::exception&) {
    return "";
  }
  if (per == 0 || per > 8) return "";
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (argc > 1 && s->get_name() == argv[1]) sub = s;
  const CLI::Option* opt = nullptr;
  if (sub != nullptr) {
    for (const CLI::Option* o : sub->get_options())
      for (const auto& l : o->get_lnames())
        if ("--" + l == name) opt = o;
  }
  if (opt == nullptr) return "";
  std::string values;
  size_t n = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    std::string given, first;  // the name as given; a value attached to it
    bool hit = false;
    for (const auto& l : opt->get_lnames())
      if (a == "--" + l || a.rfind("--" + l + "=", 0) == 0) {
        given = "--" + l;
        hit = true;
        if (a.size() > given.size()) first = a.substr(given.size() + 1);
      }
    for (const auto& sn : opt->get_snames())
      if (!hit && a.rfind("-" + sn, 0) == 0 && a.rfind("--", 0) != 0) {
        given = "-" + sn;
        hit = true;
        if (a.size() > given.size()) first = a.substr(given.size());
      }
    if (!hit) continue;
    std::string vals;
    size_t got = 0;
    // Each value as one shell word (a ' inside, a control byte: $'...').
    if (!first.empty()) vals = normgate::core::shell_quote(first), got = 1;
    for (; got < per && i + 1 < argc; ++got)
      vals += std::string(got == 0 ? "" : " ") + normgate::core::shell_quote(argv[++i]);
    values += (n++ == 0 ? "" : ", ") + given + " " + vals;
  }
  if (n < 2) return "";
  return name + " takes " + (per == 1 ? std::string("one value") : std::to_string(per) + " values") +
         " and was given " + std::to_string(n) + " times (" + values +
         "): give it once (normgate does not pick one of them)";
}

ExtrasMessage unknown_option_message(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return {};
  CLI::App* sub = nullptr;
  try {
    sub = app.get_subcommand(argv[1]);
  } catch (const CLI::OptionNotFound&) {
    return {};
  }
  const std::vector<std::string> stray = app.remaining(true);  // what ExtrasError lists
  std::vector<std::string> longs, shorts;
  for (const CLI::Option* o : sub->get_options()) {
    for (const auto& n : o->get_lnames())
      if (n != "help") longs.push_back(n);
    for (const auto& n : o->get_snames()) shorts.push_back(n);
  }
  auto lower = [](std::string x) {
    for (char& c : x) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return x;
  };
  for (int i = 2; i < argc; ++i) {
    const std::string t = argv[i];
    if (t == "--") break;
    if (std::find(stray.begin(), stray.end(), t) == stray.end()) continue;  // taken by CLI11 as an option or value
    if (t.rfind("--", 0) == 0 && t.size() > 2) {
      const size_t eq = t.find('=');
      const std::string name = t.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (name.empty() || std::find(longs.begin(), longs.end(), name) != longs.end()) continue;
      std::vector<std::string> best;
      size_t bd = 3;
      for (const auto& l : longs) {
        const size_t d = lower(l) == lower(name) ? 0 : l.rfind(name, 0) == 0 ? 1 : edit_distance(name, l) + 1;
        if (d < bd) bd = d, best.clear();
        if (d == bd) best.push_back(l);
      }
      std::string hint;
      if (best.size() == 1) hint = " (did you mean '--" + best[0] + "'?)";
      if (best.size() > 1) {
        hint = " (did you mean one of";
        for (size_t k = 0; k < best.size() && k < 5; ++k) hint += (k ? ", '--" : " '--") + best[k] + "'";
        hint += best.size() > 5 ? ", ...?)" : "?)";
      }
      return {"unknown option '--" + name + "' for 'normgate " + sub->get_name() + "'" + hint};
    }
    if (t.size() == 2 && t[0] == '-' && t[1] != '-' && !std::isdigit(static_cast<unsigned char>(t[1])) &&
        std::find(shorts.begin(), shorts.end(), t.substr(1)) == shorts.end())
      return {"unknown option '" + t + "' for 'normgate " + sub->get_name() + "'"};
  }
  if (std::find(stray.begin(), stray.end(), std::string()) != stray.end()) {
    std::string list;
    for (const auto& t : stray) list += (list.empty() ? "\"" : ", \"") + t + "\"";
    return {std::string(stray.size() == 1 ? "an empty argument (\"\") was"
                                          : "arguments " + list + " (one of them empty) were") +
                " not expected by 'normgate " + sub->get_name() + "'",
            true};
  }
  return {};
}

// `normgate --help` lists each subcommand with one short line; the
// subcommand's own --help keeps its whole description (exit codes, files).
// A subcommand without an entry here is listed with its whole description.
const char* summary(const std::string& name) {
  static const std::pair<const char*, const char*> kSummaries[] = {
      {"families", "List the input families, or describe one"},
      {"case", "Parse a case id: its canonical form and the SHA-256 of its inputs"},
      {"check", "Run cases through implementations; validate every element against the FP64 oracle"},
      {"variants", "List the kernel variants of the registry"},
      {"gate", "Gate a route table's windows against the FP64 oracle; report per window"},
      {"routes", "A table's routes and their approval state, or the dispatcher's pick for a call"},
      {"approvals", "Check (also against gate journals), seal, merge, carry, vouch for, re-check approvals"},
      {"digest", "Digest a variant's outputs on its approved campaigns (for approvals --carry, --vouch)"},
      {"derive", "Derive a route table: time candidates, split windows, gate the winners"},
      {"mutate", "Mutation score: which input family kills which negative control"},
      {"repro", "Re-run one case for one implementation: verdict, worst elements, a command"},
      {"inspect", "Summarize a normgate HDF5 file (a saved case or exported maps)"},
      {"export", "Write a report's worst cases' error maps to HDF5"},
      {"plot", "PNG pictures and an index.html of a case or maps file"},
  };
  for (const auto& [n, text] : kSummaries)
    if (name == n) return text;
  return nullptr;
}

class ShortListFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    const char* s = summary(sub->get_name());
    if (!s) return CLI::Formatter::make_subcommand(sub);
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), s, get_column_width());
    return out.str();
  }
};

}  // namespace

int main(int argc, char** argv) {
  normgate::core::keep_large_blocks();  // before any case allocates (host_memory.h)
  // Ctrl-C or a scheduler's SIGTERM while an output's temporary file is
  // being written: the file is removed, then the process ends as before.
  normgate::core::remove_temps_on_signal();
  CLI::App app{"normgate: RMSNorm training kernels for Hopper and the accuracy gate that checks them"};
  // What this binary was built with: a `pip install .` without nvcc gets the
  // CPU half, and says so here.
#ifdef NORMGATE_KERNELS_HAVE_CUDA
  const std::string built = "CUDA kernels for sm_90a";
#else
  const std::string built = "CPU half: built without CUDA, the variants run as their CPU models";
#endif
  app.set_version_flag("--version", std::string(NORMGATE_VERSION) + " (" + NORMGATE_GIT_COMMIT + "; " + built + ")");
  app.require_subcommand(1);
  normgate::app::Commands cmds;
  normgate::app::register_commands(app, cmds);
  normgate::app::decimal_number_options(app);
  // Set after the subcommands exist: they keep CLI11's formatter (whole
  // descriptions in their own --help); only this listing is short.
  app.formatter(std::make_shared<ShortListFormatter>());
  app.footer("Run 'normgate SUBCOMMAND --help' for a subcommand's options and what it reads and writes. Exit "
             "codes: 0 success or pass, 1 a check, gate or listing that did not pass, 2 usage or input error, 3 a "
             "runtime failure (repro adds 4).");
  // An option before any subcommand: normgate's own are --help and --version
  // only (CLI11 would say "A subcommand is required", naming nothing).
  if (argc > 1 && argv[1][0] == '-') {
    const std::string a = argv[1];
    if (a != "-h" && a != "--help" && a != "--version") {
      std::fprintf(stderr,
                   "normgate: error: unknown option '%s' before the subcommand (normgate's own options are --help "
                   "and --version; a subcommand's options follow it: normgate SUBCOMMAND [OPTIONS])\n",
                   normgate::app::printable_line(argv[1]).c_str());
      return 2;
    }
  }
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->get_name() == argv[1];
    }
    if (!found) {
      std::fprintf(stderr, "normgate: error: unknown subcommand '%s' (known: %s; see normgate --help)\n",
                   normgate::app::printable_line(argv[1]).c_str(), known.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {  // name the unknown option first, with the closest known one
    const ExtrasMessage m = unknown_option_message(app, argc, argv);
    const std::string text = m.text.empty() ? e.what() : m.whole ? m.text : m.text + "; " + e.what();
    std::fprintf(stderr, "normgate: error: %s\nRun with --help for more information.\n",
                 normgate::app::printable_line(text).c_str());
    return 2;
  } catch (const CLI::RequiredError& e) {  // "table is required" after `routes --bogus`: the option first
    const ExtrasMessage m = unknown_option_message(app, argc, argv);
    const std::string text = m.text.empty() ? e.what() : m.whole ? m.text : m.text + "; " + e.what();
    std::fprintf(stderr, "normgate: error: %s\nRun with --help for more information.\n",
                 normgate::app::printable_line(text).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {  // usage error: same prefix and exit code as the commands' own
    // One line: the option values it quotes cannot start lines of their own.
    const std::string repeated = repeated_option_message(app, e.what(), argc, argv);
    std::fprintf(stderr, "normgate: error: %s\nRun with --help for more information.\n",
                 normgate::app::printable_line(repeated.empty() ? std::string(e.what()) : repeated).c_str());
    return 2;
  }
  // The arguments that hold a newline: a MultilineError quoting one must not
  // show it as a line of its own (printable_message).
  std::vector<std::string> multiline_args;
  for (int i = 1; i < argc; ++i)
    if (std::strchr(argv[i], '\n') != nullptr) multiline_args.emplace_back(argv[i]);
  try {
    normgate::app::reject_empty_values(app);
    const int rc = cmds.run();
    // What went to stdout (a case's SHA-256, a listing, a verdict) is
    // buffered: a failed write shows here, and exit would drop it silently.
    errno = 0;
    std::cout.flush();
    const bool lost = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || std::cout.fail();
    if (lost) {
      const int e = errno;
      // The command itself ran to its end: files it writes (a merged
      // approvals file, reports) are written; only what it printed is lost
      // (an adversarial pass read the exit 3 as "nothing was merged").
      std::fprintf(stderr,
                   "normgate: fatal: cannot write to stdout%s%s; the command ran to its end (the files it writes are "
                   "written), its printed output is lost\n",
                   e != 0 ? ": " : "", e != 0 ? std::strerror(e) : "");
      // A verdict (1: did not pass, 4: a replay mismatch) or a usage error
      // stands; only a success whose output was lost becomes a failure.
      if (rc == 0) return 3;
    }
    return rc;
  } catch (const normgate::core::MultilineError& e) {  // lines of its own, its values escaped where it was made
    std::fprintf(stderr, "normgate: error: %s\n", normgate::app::printable_message(e.what(), multiline_args).c_str());
    return 2;
  } catch (const std::invalid_argument& e) {  // one line: a value it quotes cannot start a line of its own
    std::fprintf(stderr, "normgate: error: %s\n", normgate::app::printable_line(e.what()).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normgate: fatal: %s\n", normgate::app::printable_line(e.what()).c_str());
    // Out without the exit handlers: after a failed HDF5 write (the core
    // driver's image could not grow: out of memory) the library's own exit
    // handler closed the half-made file again and crashed (SIGSEGV, exit
    // 139, in H5F__close_cb), hiding the error's exit 3. Nothing of ours
    // runs at exit: temporaries are removed by their writers' error paths.
    std::fflush(nullptr);
    std::_Exit(3);
  }
}
