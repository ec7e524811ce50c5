// Fuzz target: HDF5 error-map files (audit/case_file.h read_maps_file, as
// `normgate plot` and `inspect` read them). The input is written to a
// scratch file. Contract: the entries or std::runtime_error naming the
// file. Entries that read back have maps of consistent sizes.
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/audit/case_file.h"

using namespace normgate::validators;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ngfuzz::write_scratch("fuzz-maps.h5", data, size);
  try {
    std::string source;
    const std::vector<MapsEntry> es = read_maps_file(path, &source);
    for (const auto& e : es) {
      NG_FUZZ_CHECK(e.maps.dw_ratio.size() == static_cast<size_t>(e.maps.cols));
      NG_FUZZ_CHECK(e.maps.rstd_ratio.size() == static_cast<size_t>(e.maps.rows));
      (void)changed_sources(e.prov);
    }
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find(path) == std::string::npos)
      ngfuzz::fail(std::string("error does not name the file: ") + e.what());
  }
  return 0;
}
