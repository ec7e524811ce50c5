// Bulk host generation of a case's inputs and their SHA-256 digests.
#include "normgate/seeds/generate.h"

#include <omp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <bit>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>
#include <memory>
#include <stdexcept>

#include "normgate/core/bf16.h"
#include "normgate/seeds/families.h"

namespace normgate::seeds {

static_assert(std::endian::native == std::endian::little,
              "digests are defined over little-endian bytes; add a byte swap for big-endian hosts");

namespace {

constexpr int64_t kMaxElements = int64_t{1} << 40;

// Fill rows x cols of `out` (BF16 bits) with tensor t, OpenMP over rows.
void fill_bf16(std::vector<uint16_t>& out, const FamilyParams& p, Tensor t, int64_t rows, int64_t cols, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = out.data() + r * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] = bf16_from_float(family_value(p, t, r, j));
  }
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx sha256_begin() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL EVP_DigestInit_ex failed");
  return ctx;
}

void sha256_update(EVP_MD_CTX* ctx, const void* data, size_t n) {
  if (n != 0 && EVP_DigestUpdate(ctx, data, n) != 1) throw std::runtime_error("sha256: OpenSSL EVP_DigestUpdate failed");
}

// 32 bytes as 64 lowercase hex digits.
std::string hex32(const unsigned char* md) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    s[2 * i] = kHex[md[i] >> 4];
    s[2 * i + 1] = kHex[md[i] & 15];
  }
  return s;
}

std::string sha256_end(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32) throw std::runtime_error("sha256: OpenSSL EVP_DigestFinal_ex failed");
  return hex32(md);
}

template <class T>
std::string sha256_vec(const std::vector<T>& v) {
  return sha256_hex(v.data(), v.size() * sizeof(T));
}

}  // namespace

HostInputs generate_host(const CaseId& c, int threads) {
  validate_case(c);
  const int64_t rows = c.rows();
  const int64_t cols = c.H;
  if (rows < 0 || cols < 1 || (rows > 0 && cols > kMaxElements / rows))
    throw std::invalid_argument("generate_host: " + to_string(c) + " has " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " elements, more than 2^40");
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const size_t n = static_cast<size_t>(rows * cols);
  const FamilyParams p = family_params(c);

  HostInputs in;
  in.id = c;
  in.rows = rows;
  in.cols = cols;
  in.x.resize(n);
  in.dy.resize(n);
  fill_bf16(in.x, p, Tensor::x, rows, cols, nt);
  fill_bf16(in.dy, p, Tensor::dy, rows, cols, nt);
  if (c.form == Form::res) {
    in.u.resize(n);
    in.dh_new.resize(n);
    fill_bf16(in.u, p, Tensor::u, rows, cols, nt);
    fill_bf16(in.dh_new, p, Tensor::dh_new, rows, cols, nt);
  }
  if (c.w == WDtype::bf16) {
    in.w_bf16.resize(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) in.w_bf16[j] = bf16_from_float(family_value(p, Tensor::w, 0, j));
  } else {
    in.w_f32.resize(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) in.w_f32[j] = family_value(p, Tensor::w, 0, j);
  }
  return in;
}

void check_inputs_sample(const HostInputs& in, int samples, int threads) {
  const CaseId& c = in.id;
  validate_case(c);
  if (samples < 2) throw std::invalid_argument("check_inputs_sample: samples = " + std::to_string(samples) + " < 2");
  const int64_t rows = c.rows(), cols = c.H;
  const std::string where = "inputs of " + to_string(c) + ": ";
  if (in.rows != rows || in.cols != cols)
    throw std::invalid_argument(where + "shape [" + std::to_string(in.rows) + ", " + std::to_string(in.cols) +
                                "], expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const bool res = c.form == Form::res;
  const size_t n = static_cast<size_t>(rows * cols);
  auto need_size = [&](const char* name, size_t got, size_t want) {
    if (got != want)
      throw std::invalid_argument(where + name + " has " + std::to_string(got) + " elements, expected " +
                                  std::to_string(want));
  };
  need_size("x", in.x.size(), n);
  need_size("dy", in.dy.size(), n);
  need_size("u", in.u.size(), res ? n : 0);
  need_size("dh_new", in.dh_new.size(), res ? n : 0);
  need_size("w_bf16", in.w_bf16.size(), c.w == WDtype::bf16 ? static_cast<size_t>(cols) : 0);
  need_size("w_f32", in.w_f32.size(), c.w == WDtype::fp32 ? static_cast<size_t>(cols) : 0);
  const FamilyParams p = family_params(c);
  auto hex = [](uint32_t v, int digits) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s = "0x";
    for (int k = digits - 1; k >= 0; --k) s += kHex[(v >> (4 * k)) & 0xFu];
    return s;
  };
  for (int64_t j = 0; j < cols; ++j) {
    const float v = family_value(p, Tensor::w, 0, j);
    if (c.w == WDtype::bf16 ? in.w_bf16[j] != bf16_from_float(v) : std::bit_cast<uint32_t>(in.w_f32[j]) != std::bit_cast<uint32_t>(v)) {
      const bool b = c.w == WDtype::bf16;
      throw std::invalid_argument(where + "w[" + std::to_string(j) + "] is " +
                                  (b ? hex(in.w_bf16[j], 4) : hex(std::bit_cast<uint32_t>(in.w_f32[j]), 8)) +
                                  ", the generator gives " +
                                  (b ? hex(bf16_from_float(v), 4) : hex(std::bit_cast<uint32_t>(v), 8)));
    }
  }
  // Sampled rows: 0, rows-1 and evenly between (every row when few).
  std::vector<int64_t> pick;
  if (rows <= samples) {
    for (int64_t r = 0; r < rows; ++r) pick.push_back(r);
  } else {
    for (int k = 0; k < samples; ++k) pick.push_back(static_cast<int64_t>(k) * (rows - 1) / (samples - 1));
  }
  struct Tsr {
    const char* name;
    Tensor t;
    const std::vector<uint16_t>* v;
  };
  std::vector<Tsr> ts{{"x", Tensor::x, &in.x}, {"dy", Tensor::dy, &in.dy}};
  if (res) {
    ts.push_back({"u", Tensor::u, &in.u});
    ts.push_back({"dh_new", Tensor::dh_new, &in.dh_new});
  }
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  const int64_t npick = static_cast<int64_t>(pick.size());
  // First mismatch in (tensor, sampled row) order, whatever the thread count.
  int64_t first = INT64_MAX;
  int64_t first_col = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t k = 0; k < npick * static_cast<int64_t>(ts.size()); ++k) {
    const Tsr& t = ts[static_cast<size_t>(k / npick)];
    const int64_t r = pick[static_cast<size_t>(k % npick)];
    const uint16_t* row = t.v->data() + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      if (row[j] != bf16_from_float(family_value(p, t.t, r, j))) {
#pragma omp critical(ng_check_inputs_sample)
        if (k < first) {
          first = k;
          first_col = j;
        }
        break;
      }
    }
  }
  if (first != INT64_MAX) {
    const Tsr& t = ts[static_cast<size_t>(first / npick)];
    const int64_t r = pick[static_cast<size_t>(first % npick)];
    throw std::invalid_argument(where + t.name + "[" + std::to_string(r) + ", " + std::to_string(first_col) +
                                "] is " + hex((*t.v)[static_cast<size_t>(r * cols + first_col)], 4) +
                                ", the generator gives " +
                                hex(bf16_from_float(family_value(p, t.t, r, first_col)), 4) +
                                " (sampled rows checked; not this case's inputs?)");
  }
}

std::string sha256_hex(const void* data, size_t n) {
  MdCtx ctx = sha256_begin();
  sha256_update(ctx.get(), data, n);
  return sha256_end(ctx.get());
}

std::string hmac_sha256_hex(std::string_view key, const void* data, size_t n) {
  if (key.empty() || key.size() > INT_MAX) throw std::invalid_argument("hmac_sha256_hex: an empty or oversized key");
  static const unsigned char kNothing = 0;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            n ? static_cast<const unsigned char*>(data) : &kNothing, n, md, &len) ||
      len != 32)
    throw std::runtime_error("hmac_sha256: OpenSSL HMAC failed");
  return hex32(md);
}

InputDigests digest(const HostInputs& in) {
  InputDigests d;
  d.x = sha256_vec(in.x);
  d.dy = sha256_vec(in.dy);
  const bool bf16w = in.id.w == WDtype::bf16;
  d.w = bf16w ? sha256_vec(in.w_bf16) : sha256_vec(in.w_f32);
  const bool res = in.id.form == Form::res;
  if (res) {
    d.u = sha256_vec(in.u);
    d.dh_new = sha256_vec(in.dh_new);
  }
  MdCtx all = sha256_begin();
  sha256_update(all.get(), in.x.data(), in.x.size() * 2);
  sha256_update(all.get(), in.dy.data(), in.dy.size() * 2);
  if (bf16w)
    sha256_update(all.get(), in.w_bf16.data(), in.w_bf16.size() * 2);
  else
    sha256_update(all.get(), in.w_f32.data(), in.w_f32.size() * 4);
  if (res) {
    sha256_update(all.get(), in.u.data(), in.u.size() * 2);
    sha256_update(all.get(), in.dh_new.data(), in.dh_new.size() * 2);
  }
  d.all = sha256_end(all.get());
  return d;
}

}  // namespace normgate::seeds
