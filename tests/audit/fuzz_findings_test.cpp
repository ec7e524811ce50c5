// tests/audit/fuzz_findings_test.cpp: inputs the fuzz targets of tests/fuzz/
// (fuzz_case_file, fuzz_maps_file) found crashing the HDF5 readers, replayed
// in the normal build: each must give std::runtime_error naming the file and
// what is wrong, never a crash. The inputs are in tests/fuzz/corpus/.
#include <gtest/gtest.h>

#include <string>

#include "normgate/audit/case_file.h"

namespace nv = normgate::validators;

namespace {

std::string corpus(const std::string& target, const std::string& name) {
  return std::string(NORMGATE_SOURCE_DIR) + "/tests/fuzz/corpus/" + target + "/" + name;
}

// The error of f(), or "" when it returns.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// One byte of a case file (the size field of reference/rstd_bound's float64
// datatype: 8 -> 2097160 bytes) made HDF5's conversion on read copy 2 MiB out
// of a 28-byte buffer: `normgate inspect` and `repro --file` died with
// SIGSEGV (exit 139). The stored type must be exactly the one written.
TEST(FuzzFindings, CaseFileDatasetTypeSizeIsAnError) {
  const std::string path = corpus("case_file", "crash-f64-type-size-2MiB.h5");
  // The input is a normgate-case/1 file: the readers refuse that schema
  // before any dataset is opened...
  for (const std::string& err : {error_of([&] { (void)nv::read_case_file(path); }),
                                 error_of([&] { (void)nv::inspect_file(path); })}) {
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("normgate-case/1"), std::string::npos) << err;
  }
  // ...and the upgrade, which reads it with the old format's checks, finds
  // the stored type (not a crash).
  const std::string err = error_of([&] { nv::upgrade_file(path, testing::TempDir() + "fuzz_upgrade_out.h5"); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("dataset reference/rstd_bound is stored as float of 2097160 bytes"), std::string::npos) << err;
}
