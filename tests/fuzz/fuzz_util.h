// tests/fuzz/fuzz_util.h: what every libFuzzer harness of tests/fuzz/ shares.
//
// A harness feeds one input to one parser and checks the parser's documented
// contract: it returns a value (whose properties the harness then checks) or
// throws the documented exception type. Anything else is a finding: a crash,
// a sanitizer report, a hang, or another exception (reported here by name,
// then abort(), which libFuzzer records as a crash with the input).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

namespace ngfuzz {

/// Abort with a message (a contract violation found by the harness).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "\nnormgate fuzz: contract violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define NG_FUZZ_CHECK(cond)                                                                              \
  do {                                                                                                   \
    if (!(cond)) ::ngfuzz::fail(std::string(#cond) + " (" __FILE__ ":" + std::to_string(__LINE__) + ")"); \
  } while (0)

/// Run f; an exception of type Allowed (or derived) is the documented
/// rejection: return false. A value: return true. Any other exception: fail.
template <class Allowed, class F>
bool accepts(const char* parser, F&& f) {
  try {
    f();
    return true;
  } catch (const Allowed&) {
    return false;
  } catch (const std::exception& e) {
    fail(std::string(parser) + " threw " + typeid(e).name() + " (not the documented type): " + e.what());
  } catch (...) {
    fail(std::string(parser) + " threw a non-std exception");
  }
}

/// Same, with two documented exception types.
template <class A1, class A2, class F>
bool accepts2(const char* parser, F&& f) {
  try {
    f();
    return true;
  } catch (const A1&) {
    return false;
  } catch (const A2&) {
    return false;
  } catch (const std::exception& e) {
    fail(std::string(parser) + " threw " + typeid(e).name() + " (not the documented type): " + e.what());
  } catch (...) {
    fail(std::string(parser) + " threw a non-std exception");
  }
}

/// A scratch folder of this process (under $TMPDIR, else /dev/shm when it
/// exists, else /tmp), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string base;
    if (const char* t = std::getenv("TMPDIR"); t && *t) base = t;
    else if (std::filesystem::is_directory("/dev/shm")) base = "/dev/shm";
    else base = "/tmp";
    std::string tmpl = base + "/normgate-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) fail("cannot make a scratch folder under " + base);
    static const std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

/// Write the bytes to scratch_dir()/name (replacing it) and return its path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) fail("cannot write the scratch file " + path);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace ngfuzz
