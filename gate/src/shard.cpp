// gate/src/shard.cpp: which shard runs a grid case (--shard K/N), and the
// parse of "K/N".
#include <charconv>
#include <stdexcept>
#include <string>

#include "normgate/gate/gate.h"
#include "normgate/seeds/generate.h"  // sha256_hex

namespace normgate::validators {

namespace {
constexpr int kMaxShards = 65536;
}

int shard_of(std::string_view case_id, int n) {
  if (n < 1) throw std::invalid_argument("shard count " + std::to_string(n) + " < 1");
  // A hash of the case id, not its place in a list: the place would move
  // with the --windows filter (and with the table's other windows), the
  // hash does not. SHA-256 because it is already linked and has the same
  // value on every machine and compiler (std::hash has not).
  const std::string hex = seeds::sha256_hex(case_id.data(), case_id.size());
  uint64_t v = 0;
  std::from_chars(hex.data(), hex.data() + 16, v, 16);
  return static_cast<int>(v % static_cast<uint64_t>(n)) + 1;
}

std::pair<int, int> parse_shard(std::string_view text) {
  const std::string what = "--shard '" + std::string(text) + "': ";
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos)
    throw std::invalid_argument(what + "expected K/N (shard K of N, 1 <= K <= N), e.g. 2/3");
  auto number = [&](std::string_view s, const char* name) {
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range && p == s.data() + s.size())
      throw std::invalid_argument(what + name + " '" + std::string(s) + "' is too large (at most " +
                                  std::to_string(kMaxShards) + ")");
    if (s.empty() || ec != std::errc() || p != s.data() + s.size())
      throw std::invalid_argument(what + name + " '" + std::string(s) + "' is not a decimal integer");
    return v;
  };
  const int k = number(text.substr(0, slash), "K");
  const int n = number(text.substr(slash + 1), "N");
  if (n < 1 || n > kMaxShards)
    throw std::invalid_argument(what + "N = " + std::to_string(n) + " is outside 1.." + std::to_string(kMaxShards));
  if (k < 1 || k > n)
    throw std::invalid_argument(what + "K = " + std::to_string(k) + " is outside 1..N = 1.." + std::to_string(n));
  return {k, n};
}

}  // namespace normgate::validators
