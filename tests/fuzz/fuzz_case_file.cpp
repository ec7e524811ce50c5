// Fuzz target: HDF5 case files (audit/case_file.h read_case_file, as
// `normgate repro --file` reads them, and inspect_file, as `normgate inspect`
// does). The input is written to a scratch file. Contract: a value or
// std::runtime_error naming the file, from each of them. A case that reads
// back has the shapes of its case id. Not list_layout (only tests call it):
// HDF5 1.10's attribute iteration crashes inside the library on some
// corrupted attribute messages (README.md, Findings), which would hide
// everything else.
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/audit/case_file.h"

using namespace normgate::validators;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ngfuzz::write_scratch("fuzz-case.h5", data, size);
  auto names_file = [&](const std::runtime_error& e) {
    if (std::string(e.what()).find(path) == std::string::npos)
      ngfuzz::fail(std::string("error does not name the file: ") + e.what());
  };
  try {
    const SavedCase c = read_case_file(path);
    const auto rows = static_cast<size_t>(c.inputs.rows), cols = static_cast<size_t>(c.inputs.cols);
    NG_FUZZ_CHECK(c.inputs.x.size() == rows * cols && c.inputs.dy.size() == rows * cols);
    NG_FUZZ_CHECK(c.outputs.dw.size() == cols && c.outputs.rstd.size() == rows);
    (void)changed_sources(c.prov);
  } catch (const std::runtime_error& e) {
    names_file(e);
  }
  try {
    (void)inspect_file(path);
  } catch (const std::runtime_error& e) {
    names_file(e);
  }
  return 0;
}
