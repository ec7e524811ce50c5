// Fuzz target: journal files (gate/journal.h Journal::open on a scratch file).
// The campaign is fixed (campaign() below; the committed corpus uses it);
// mutated headers exercise the "different campaign" refusal. Contract: an
// open journal, or std::invalid_argument (not a journal, other campaign, bad
// line) or std::runtime_error (I/O). An opened journal leaves the file ending
// in a newline with its torn tail dropped; opening it again resumes the same
// records and drops nothing.
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/gate/journal.h"

using namespace normgate::validators;

namespace {

const nlohmann::json& campaign() {
  // The campaign of `normgate gate tests/data/routes/small.toml --seeds normal:0..0 --t-per-window 2
  // --dense-points 1 --fresh-factor 1 --backend cpu` (its journals are the corpus).
  static const nlohmann::json c = nlohmann::json::parse(
      R"({"allow_controls":false,"backend":"cpu-model","dense_points":1,"dense_step":64,"device":"cpu","fresh)"
      R"(_factor":1,"oracle":"auto","seeds":"normal:0..0","t_per_window":2,"table_sha256":"ea842b5735e56b2954)"
      R"(3e844fa281c4fdbb44615ab71b41f0c8aff3f3375628e0","variant_sha256":{"bwd_det_chunked":"0ad5fbe18dab77e)"
      R"(4015adaa4e59cf86b4c01871697e881376ccff03c7a57ba0b","bwd_nondet_atomic":"5d61e1e50d398c5c8a53788ba406)"
      R"(c8c1111d7cac8e0c86209f0087733a8216b3","fwd_rowwise":"3e0c4c1dcfe9f81e384679ff54f1edc3a9dc347c3d96956)"
      R"(f49abdce1dc15f629"}})");
  return c;
}

std::string dump(const std::vector<CaseRecord>& rs) {
  std::string s;
  for (const auto& r : rs) s += to_json(r).dump() + "\n";
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ngfuzz::write_scratch("fuzz.journal", data, size);
  std::string first;
  {
    Journal j;
    if (!ngfuzz::accepts2<std::invalid_argument, std::runtime_error>(
            "Journal::open", [&] { j = Journal::open(path, campaign()); }))
      return 0;
    NG_FUZZ_CHECK(j.dropped_bytes() >= 0 && static_cast<size_t>(j.dropped_bytes()) <= size);
    first = dump(j.resumed());
  }
  const std::string kept = slurp(path);
  NG_FUZZ_CHECK(!kept.empty() && kept.back() == '\n');
  // Complete lines are kept as they were, less blank lines ending the file;
  // a last line without its newline is dropped (torn), or kept with its
  // newline written when it passes every check (a write cut just before
  // it); without a complete line, the file is the new header.
  std::string_view in = ngfuzz::as_text(data, size);
  if (const size_t last = in.find_last_not_of(" \t\r\n"); last != std::string_view::npos)
    if (const size_t end = in.find('\n', last); end != std::string_view::npos) in = in.substr(0, end + 1);
  const size_t nl = in.rfind('\n');
  if (nl != std::string_view::npos)
    NG_FUZZ_CHECK(kept == in.substr(0, nl + 1) || (nl + 1 < in.size() && kept == std::string(in) + "\n"));
  else NG_FUZZ_CHECK(first.empty() && kept.find('\n') == kept.size() - 1);
  Journal again;
  if (!ngfuzz::accepts2<std::invalid_argument, std::runtime_error>(
          "Journal::open", [&] { again = Journal::open(path, campaign()); }))
    ngfuzz::fail("a journal that opened once does not open again");
  NG_FUZZ_CHECK(again.dropped_bytes() == 0);
  NG_FUZZ_CHECK(dump(again.resumed()) == first);
  return 0;
}
