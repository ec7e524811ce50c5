// harness/src/devices.cpp: parse_devices and to_string of devices.h (no CUDA;
// device_count() lives in runner.cu and no_cuda.cpp).
#include "normgate/harness/devices.h"

#include <charconv>
#include <stdexcept>

namespace normgate::kernels {

std::vector<int> parse_devices(std::string_view text, int count) {
  const std::string whole(text);
  auto bad = [&whole](const std::string& why) {
    throw std::invalid_argument("bad device list '" + whole + "': " + why);
  };
  std::vector<int> out;
  if (text == "all") {
    for (int d = 0; d < count; ++d) out.push_back(d);
    return out;
  }
  if (text.empty()) bad("empty (expected all, or device indices such as 0,1)");
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item.empty()) bad("an empty entry (expected device indices such as 0,1)");
    int v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.front() == '-' && ec == std::errc() && end == item.data() + item.size())
      bad("device " + std::string(item) + " is negative");
    if (ec != std::errc() || end != item.data() + item.size() || item.front() == '+')
      bad(std::string(1, '\'').append(item).append("' is not a device index (expected all, or indices such as 0,1)"));
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  for (int v : out)  // after the syntax of every entry: a typo is named as such on a machine without a GPU too
    if (v >= count)
      bad("device " + std::to_string(v) + " does not exist (" + std::to_string(count) + " visible CUDA device" +
          (count == 1 ? "" : "s") + (count > 0 ? ": 0.." + std::to_string(count - 1) : "") + ")");
  return out;
}

std::string to_string(const std::vector<int>& devices) {
  std::string s;
  for (int d : devices) {
    if (!s.empty()) s += ',';
    s += std::to_string(d);
  }
  return s;
}

}  // namespace normgate::kernels
