// tests/audit/case_file_digest_test.cpp: the content digest of case and maps
// files (case_file.h, datasets/SCHEMA.md "Content digest"). An attribute or
// dataset edited with the HDF5 API (which keeps HDF5's own checksums valid)
// is a read error naming the file: the two attacks (a case id's
// seed=1 made seed=0, a failing verdict made "pass"), an edited output, an
// added attribute. Bit flips anywhere in a small case file give either the
// identical read or an error naming the file. A dataset whose dims are absurd
// is an error naming file and dataset, never std::bad_alloc. Files of the
// older schema are refused, and upgrade_file rewrites them with a digest.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "normgate/audit/case_file.h"
#include "normgate/audit/repro.h"
#include "normgate/core/host_memory.h"
#include "util/cpu_request.h"
#include "util/xorshift64.h"

namespace nv = normgate::validators;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  const fs::path d = fs::path(NORMGATE_BINARY_DIR) / ("test_case_digest_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

nv::SavedCase saved(const char* id, const char* impl) {
  nv::ReproOptions o;
  o.k = 1;
  o.keep_case = true;
  o.tile = 4;
  o.normgate_version = "test";
  return *nv::repro(nv::testing::cpu_request(id, impl), o).saved;
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

// Edits with the HDF5 API, as h5py or h5dump-and-edit would make them: HDF5
// keeps its own metadata checksums valid, only the content digest can tell.
struct H5File {
  hid_t f;
  explicit H5File(const std::string& p) : f(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {}
  ~H5File() { H5Fclose(f); }
};

void set_string_attr(const std::string& path, const char* obj, const char* name, const std::string& value) {
  H5File h(path);
  ASSERT_GE(h.f, 0) << path;
  const hid_t o = H5Oopen(h.f, obj, H5P_DEFAULT);
  if (H5Aexists(o, name) > 0) H5Adelete(o, name);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, value.size());
  const hid_t sp = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(o, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(H5Awrite(a, t, value.data()), 0);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  H5Oclose(o);
}

void delete_attr(const std::string& path, const char* obj, const char* name) {
  H5File h(path);
  const hid_t o = H5Oopen(h.f, obj, H5P_DEFAULT);
  ASSERT_GE(H5Adelete(o, name), 0);
  H5Oclose(o);
}

// Replace dataset `name` with a chunked one of `n` float elements, none of
// them written (the file stays small; its dims say n).
void replace_with_huge(const std::string& path, const char* name, hsize_t n) {
  H5File h(path);
  ASSERT_GE(H5Ldelete(h.f, name, H5P_DEFAULT), 0);
  const hsize_t chunk = 1024;
  const hid_t sp = H5Screate_simple(1, &n, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  const hid_t d = H5Dcreate2(h.f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}

void flip_output(const std::string& path, const char* name) {
  H5File h(path);
  const hid_t d = H5Dopen2(h.f, name, H5P_DEFAULT);
  std::vector<uint16_t> v(static_cast<size_t>(H5Sget_simple_extent_npoints(H5Dget_space(d))));
  H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  v[3] ^= 1;
  H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
}

// The read must fail with a std::runtime_error naming the file (and `what`).
void expect_refused(const std::string& path, const std::string& what, bool inspect = true) {
  for (int k = 0; k < (inspect ? 2 : 1); ++k) {
    try {
      if (k == 0) {
        const nv::SavedCase c = nv::read_case_file(path);
        ADD_FAILURE() << path << ": read as case " << c.prov.case_id << ", verdict " << c.prov.verdict;
      } else {
        ADD_FAILURE() << nv::inspect_file(path);
      }
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

// Overwrite int64 attributes of object `obj` (which has them) in the file at path.
void set_int_attrs(const std::string& path, const char* obj, std::initializer_list<std::pair<const char*, int64_t>> attrs) {
  H5File h(path);
  ASSERT_GE(h.f, 0);
  const hid_t o = H5Oopen(h.f, obj, H5P_DEFAULT);
  ASSERT_GE(o, 0);
  for (const auto& [a, v] : attrs) {
    const hid_t at = H5Aopen(o, a, H5P_DEFAULT);
    ASSERT_GE(at, 0) << a;
    ASSERT_GE(H5Awrite(at, H5T_NATIVE_INT64, &v), 0) << a;
    H5Aclose(at);
  }
  H5Oclose(o);
}

// read_maps_file(path) throws std::runtime_error containing `what` (not
// std::bad_alloc, not a read).
void expect_maps_refused(const std::string& path, const std::string& what) {
  try {
    (void)nv::read_maps_file(path);
    ADD_FAILURE() << "read";
  } catch (const std::bad_alloc&) {
    ADD_FAILURE() << "std::bad_alloc";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

bool same(const nv::SavedCase& a, const nv::SavedCase& b) {
  auto bits = [](const auto& x, const auto& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
  };
  const nv::Provenance &p = a.prov, &q = b.prov;
  return p.case_id == q.case_id && p.impl == q.impl && p.impl_sha256 == q.impl_sha256 && p.backend == q.backend &&
         p.oracle == q.oracle && p.escalations == q.escalations && p.window == q.window && p.seed_set == q.seed_set &&
         p.family == q.family && p.budgets == q.budgets && p.verdict == q.verdict && p.gpu == q.gpu &&
         p.driver == q.driver && p.cuda == q.cuda && p.normgate_version == q.normgate_version &&
         p.normgate_commit == q.normgate_commit && p.date == q.date && p.fwd == q.fwd && p.fwd_sha256 == q.fwd_sha256 &&
         a.inputs_sha256 == b.inputs_sha256 && bits(a.inputs.x, b.inputs.x) && bits(a.inputs.dy, b.inputs.dy) &&
         bits(a.inputs.w_bf16, b.inputs.w_bf16) && bits(a.inputs.w_f32, b.inputs.w_f32) &&
         bits(a.outputs.y, b.outputs.y) && bits(a.outputs.dx, b.outputs.dx) && bits(a.outputs.rstd, b.outputs.rstd) &&
         bits(a.outputs.dw, b.outputs.dw) && bits(a.ref_rstd, b.ref_rstd) && bits(a.ref_rstd_bound, b.ref_rstd_bound) &&
         bits(a.ref_dw, b.ref_dw) && bits(a.ref_dw_bound, b.ref_dw_bound) && a.maps.rows == b.maps.rows &&
         a.maps.cols == b.maps.cols && a.maps.tile == b.maps.tile && bits(a.maps.dw_ratio, b.maps.dw_ratio) &&
         bits(a.maps.dw_bound, b.maps.dw_bound) && bits(a.maps.dw_bound_tol, b.maps.dw_bound_tol) &&
         bits(a.maps.rstd_ratio, b.maps.rstd_ratio) && bits(a.maps.y_tiles, b.maps.y_tiles) &&
         bits(a.maps.dx_tiles, b.maps.dx_tiles) && bits(a.maps.dx_full, b.maps.dx_full) &&
         a.maps.hist == b.maps.hist;
}

constexpr const char* kCase = "H=16,T=7,w=bf16,form=plain,family=cancel,seed=1";

}  // namespace

// The first attack: /@case_id seed=1 made seed=0 (one bit). The
// inputs still hash to /@inputs_sha256 (they are the stored bytes), so
// without a digest over the attributes inspect said "verified" under the
// wrong case.
TEST(CaseFileDigest, EditedCaseIdIsAnError) {
  const std::string p = temp_path("case_id.h5");
  nv::write_case_file(p, saved(kCase, "ctl_fp32_seq"));
  ASSERT_EQ(nv::read_case_file(p).prov.case_id, kCase);
  set_string_attr(p, "/", "case_id", "H=16,T=7,w=bf16,form=plain,family=cancel,seed=0");
  expect_refused(p, "content SHA-256 mismatch");
  fs::remove_all(fs::path(p).parent_path());
}

// The second: /@verdict of a failing control edited to "pass".
TEST(CaseFileDigest, EditedVerdictIsAnError) {
  const std::string p = temp_path("verdict.h5");
  nv::write_case_file(p, saved(kCase, "ctl_fp32_seq"));
  ASSERT_EQ(nv::read_case_file(p).prov.verdict, "fail");
  set_string_attr(p, "/", "verdict", "pass");
  expect_refused(p, "content SHA-256 mismatch");
  fs::remove_all(fs::path(p).parent_path());
}

// One output element, an added attribute, a removed one, the digest itself.
TEST(CaseFileDigest, OtherEditsAreErrors) {
  const nv::SavedCase c = saved(kCase, "bwd_det_chunked");
  const std::string p = temp_path("edits.h5");
  nv::write_case_file(p, c);
  const std::vector<char> good = slurp(p);
  flip_output(p, "outputs/dx");
  expect_refused(p, "content SHA-256 mismatch");
  spit(p, good);
  set_string_attr(p, "/outputs/y", "note", "x");
  expect_refused(p, "attribute /outputs/y@note is not part of normgate-case/2");
  spit(p, good);
  delete_attr(p, "/", "window");
  expect_refused(p, "attribute /@window is missing");
  spit(p, good);
  set_string_attr(p, "/", "content_sha256", std::string(64, '0'));
  expect_refused(p, "content SHA-256 mismatch");
  spit(p, good);
  EXPECT_TRUE(same(nv::read_case_file(p), c));
  fs::remove_all(fs::path(p).parent_path());
}

// Objects and links outside the schema, which need no new digest: an empty
// group, a second name of a dataset, soft and external links. Each was read
// as the untouched file (the digest covers attributes and datasets only).
TEST(CaseFileDigest, GroupsAndLinksOutsideTheSchemaAreErrors) {
  const nv::SavedCase c = saved(kCase, "bwd_det_chunked");
  const std::string p = temp_path("links.h5");
  nv::write_case_file(p, c);
  const std::vector<char> good = slurp(p);
  struct Edit {
    const char* said;
    std::function<herr_t(hid_t)> make;
  };
  const Edit edits[] = {
      {"group /extra is not part of normgate-case/2",
       [](hid_t f) {
         const hid_t g = H5Gcreate2(f, "/extra", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
         return g < 0 ? herr_t(-1) : H5Gclose(g);
       }},
      {"link /outputs/y2 (a second name of an object) is not part of normgate-case/2",
       [](hid_t f) { return H5Lcreate_hard(f, "/outputs/y", f, "/outputs/y2", H5P_DEFAULT, H5P_DEFAULT); }},
      {"soft link /outputs/z is not part of normgate-case/2",
       [](hid_t f) { return H5Lcreate_soft("/outputs/y", f, "/outputs/z", H5P_DEFAULT, H5P_DEFAULT); }},
      {"external link /ext is not part of normgate-case/2",
       [](hid_t f) { return H5Lcreate_external("other.h5", "/x", f, "/ext", H5P_DEFAULT, H5P_DEFAULT); }},
      // A dataset named as an attribute's manifest key (/maps@rows is the
      // key of /maps's attribute rows) was taken for that attribute: never
      // hashed, and the file read as untouched.
      {"an object name with spaces, control characters or '@' is not part of normgate-case/2",
       [](hid_t f) {
         const hsize_t one = 1;
         const hid_t sp = H5Screate_simple(1, &one, nullptr);
         const hid_t d = H5Dcreate2(f, "/maps@rows", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
         H5Sclose(sp);
         return d < 0 ? herr_t(-1) : H5Dclose(d);
       }},
  };
  for (const Edit& e : edits) {
    spit(p, good);
    {
      H5File h(p);
      ASSERT_GE(h.f, 0);
      ASSERT_GE(e.make(h.f), 0) << e.said;
    }
    expect_refused(p, e.said);
  }
  spit(p, good);
  EXPECT_TRUE(same(nv::read_case_file(p), c));
  fs::remove_all(fs::path(p).parent_path());
}

// A maps file: an entry's verdict and a max err/tol edited.
TEST(CaseFileDigest, EditedMapsEntryIsAnError) {
  const nv::SavedCase c = saved(kCase, "ctl_fp32_seq");
  std::vector<nv::MapsEntry> es(1);
  es[0].prov = c.prov;
  es[0].maps = c.maps;
  es[0].max_ratio = {0.1, 0.01, 0.3, 40.0};
  const std::string p = temp_path("maps.h5");
  nv::write_maps_file(p, "r.json", es);
  ASSERT_EQ(nv::read_maps_file(p).at(0).prov.verdict, "fail");
  set_string_attr(p, "/cases/0000", "verdict", "pass");
  try {
    (void)nv::read_maps_file(p);
    ADD_FAILURE() << "an edited maps entry was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": content SHA-256 mismatch"), std::string::npos) << e.what();
  }
  // The writer refuses maps that do not have their case's shape (the reader would).
  es[0].prov.case_id = "H=17,T=7,w=bf16,form=plain,family=cancel,seed=1";
  EXPECT_THROW(nv::write_maps_file(temp_path("bad.h5"), "r.json", es), std::invalid_argument);
  EXPECT_FALSE(fs::exists(temp_path("bad.h5")));
  fs::remove_all(fs::path(p).parent_path());
}

// Dims far beyond the case's: an error naming the file and the dataset
// before anything is allocated (it was std::bad_alloc, no file named).
TEST(CaseFileDigest, AbsurdDimsAreAnErrorNotBadAlloc) {
  const std::string p = temp_path("dims.h5");
  nv::write_case_file(p, saved(kCase, "bwd_det_chunked"));
  replace_with_huge(p, "outputs/dw", hsize_t{1} << 39);
  try {
    (void)nv::read_case_file(p);
    ADD_FAILURE() << "read";
  } catch (const std::bad_alloc&) {
    ADD_FAILURE() << "std::bad_alloc";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": dataset outputs/dw has shape [549755813888], expected [16]"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(fs::path(p).parent_path());
}

// A case id beyond host memory (T = 2^31 at H = 16384; a crafted file's
// datasets of unwritten chunks can match it in 16 KB): refused naming the
// file before any dataset is allocated (std::bad_alloc, exit 3, before). A
// maps file's entry the same.
TEST(CaseFileDigest, ACaseIdBeyondHostMemoryIsAnErrorBeforeAnyRead) {
  const std::string big = "H=16384,T=2147483648,w=bf16,form=plain,family=cancel,seed=1";
  const std::string p = temp_path("huge_id.h5");
  nv::write_case_file(p, saved(kCase, "bwd_det_chunked"));
  set_string_attr(p, "/", "case_id", big);
  // The bound named as the host memory check sees it (this host's memory,
  // a cgroup limit or what is left of ulimit -v: HostMemory::describe_usable).
  // 262184 GiB: x, dy, y, dx in BF16 (2^48 bytes) and 20 bytes a row (rstd
  // FP32, the reference rstd and its bound FP64), counted before the maps.
  expect_refused(p, p + ": its case " + big + " needs 262184.0 GiB of host memory to read, more than " +
                        normgate::core::host_memory().describe_usable() + " (a damaged or crafted file?)");
  const nv::SavedCase c = saved(kCase, "ctl_fp32_seq");
  std::vector<nv::MapsEntry> es(1);
  es[0].prov = c.prov;
  es[0].maps = c.maps;
  const std::string m = temp_path("huge_maps.h5");
  nv::write_maps_file(m, "r.json", es);
  set_string_attr(m, "/cases/0000", "case_id", big);
  set_int_attrs(m, "/cases/0000", {{"rows", int64_t{1} << 31}, {"cols", 16384}});
  expect_maps_refused(m, m + ": group cases/0000 (2147483648 x 16384) needs ");
  fs::remove_all(fs::path(p).parent_path());
}

// Two maps groups, each within the host's memory, together beyond it: the
// reader holds every entry at once, so the sum is refused before any
// dataset is read (each group was checked alone, and the read ended in
// std::bad_alloc).
TEST(CaseFileDigest, MapsGroupsTogetherBeyondHostMemoryAreAnError) {
  const uint64_t have = normgate::core::host_memory().usable();
  if (have == 0) GTEST_SKIP() << "the host does not say how much memory it has";
  const nv::SavedCase c = saved(kCase, "ctl_fp32_seq");
  std::vector<nv::MapsEntry> es(2);
  for (auto& e : es) {
    e.prov = c.prov;
    e.maps = c.maps;
  }
  const std::string m = temp_path("two_maps.h5");
  nv::write_maps_file(m, "r.json", es);
  // Each group's case: rows x 16384 with tile 1, 8 B a row and 8 B a tile
  // (two tile maps): 8 * rows * 16385 bytes, 0.6 of the host's memory.
  const int64_t cols = 16384, rows = static_cast<int64_t>(0.6 * static_cast<double>(have) / (8.0 * (cols + 1)));
  const std::string id = "H=16384,T=" + std::to_string(rows) + ",w=bf16,form=plain,family=cancel,seed=1";
  for (const char* g : {"/cases/0000", "/cases/0001"}) {
    set_string_attr(m, g, "case_id", id);
    set_int_attrs(m, g, {{"rows", rows}, {"cols", cols}, {"tile", 1}});
  }
  expect_maps_refused(m, m + ": the sum of its 2 groups of maps needs ");
  // A group beyond memory on its own is named, whatever its place.
  set_string_attr(m, "/cases/0001", "case_id", "H=16384,T=2147483648,w=bf16,form=plain,family=cancel,seed=1");
  set_int_attrs(m, "/cases/0001", {{"rows", int64_t{1} << 31}});
  expect_maps_refused(m, m + ": group cases/0001 (2147483648 x 16384) needs ");
  fs::remove_all(fs::path(m).parent_path());
}

// Bit flips: a fixed-seed sample of 2000 bits over the whole file plus every
// bit of the bytes holding /@case_id and /@verdict. Each flip reads back
// identical (a bit HDF5 never reads) or is an error naming the file; never a
// changed label or value, never another exception.
TEST(CaseFileDigest, BitFlipsAreHarmlessOrErrorsNamingTheFile) {
  const nv::SavedCase c = saved(kCase, "ctl_fp32_seq");
  const std::string src = temp_path("flip_src.h5");
  nv::write_case_file(src, c);
  const std::vector<char> good = slurp(src);
  ASSERT_TRUE(same(nv::read_case_file(src), c));
  std::vector<size_t> bits;
  normgate::test::Xorshift64 rng(0x35);
  for (int i = 0; i < 2000; ++i) bits.push_back(static_cast<size_t>(rng() % (good.size() * 8)));
  const std::string text(good.begin(), good.end());
  for (const std::string& s : {std::string(kCase), std::string("fail")}) {
    const size_t at = text.find(s);
    ASSERT_NE(at, std::string::npos) << s;
    for (size_t b = at * 8; b < (at + s.size()) * 8; ++b) bits.push_back(b);
  }
  const std::string p = temp_path("flip.h5");
  int identical = 0, errors = 0;
  for (size_t b : bits) {
    std::vector<char> bad = good;
    bad[b / 8] = static_cast<char>(bad[b / 8] ^ (1 << (b % 8)));
    spit(p, bad);
    try {
      const nv::SavedCase r = nv::read_case_file(p);
      EXPECT_TRUE(same(r, c)) << "bit " << b << " (byte " << b / 8 << "): read with changed content, case "
                              << r.prov.case_id << ", verdict " << r.prov.verdict;
      ++identical;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u) << "bit " << b << ": " << e.what();
      ++errors;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "bit " << b << ": " << typeid(e).name() << ": " << e.what();
    }
  }
  EXPECT_EQ(identical + errors, static_cast<int>(bits.size()));
  EXPECT_GT(errors, 0);
  std::printf("[ flips ] %zu bits of a %zu-byte file: %d identical reads, %d errors naming the file\n", bits.size(),
              good.size(), identical, errors);
  fs::remove_all(fs::path(p).parent_path());
}

// The older schema (no content digest) is refused with a message saying how
// to write the file again; upgrade_file rewrites one with a digest after the
// old checks, and refuses one whose inputs were modified.
TEST(CaseFileDigest, OldSchemaRefusedAndUpgraded) {
  const nv::SavedCase c = saved(kCase, "ctl_fp32_seq");
  const std::string old = temp_path("old.h5");
  nv::write_case_file(old, c);
  set_string_attr(old, "/", "schema", "normgate-case/1");
  delete_attr(old, "/", "content_sha256");
  expect_refused(old, "normgate-case/1' was written before content digests");
  expect_refused(old, "--upgrade");
  const std::string up = temp_path("up.h5");
  EXPECT_EQ(nv::upgrade_file(old, up), "normgate-case/2");
  EXPECT_TRUE(same(nv::read_case_file(up), c));
  const std::string text = nv::inspect_file(up);
  EXPECT_NE(text.find("upgraded from normgate-case/1: its attributes were covered by no digest before"),
            std::string::npos)
      << text;
  // An old file whose inputs no longer hash to their digest is not upgraded.
  nv::SavedCase mod = c;
  mod.inputs.x[5] ^= 1;
  const std::string bad = temp_path("old_bad.h5");
  nv::write_case_file(bad, mod);
  set_string_attr(bad, "/", "schema", "normgate-case/1");
  delete_attr(bad, "/", "content_sha256");
  EXPECT_THROW(nv::upgrade_file(bad, temp_path("up_bad.h5")), std::runtime_error);
  EXPECT_FALSE(fs::exists(temp_path("up_bad.h5")));
  // A current file is not "upgraded".
  EXPECT_THROW(nv::upgrade_file(up, temp_path("up2.h5")), std::runtime_error);
  fs::remove_all(fs::path(old).parent_path());
}
