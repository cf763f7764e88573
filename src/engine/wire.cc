#include "engine/wire.h"

#include <cmath>
#include <cstring>

#include "common/error.h"

namespace tessera {
namespace engine {
namespace {

constexpr uint8_t kVersion = 4;  // 2: TensorSpec::device; 3: ::refusal; 4: ::order
constexpr uint32_t kMaxNameBytes = 1 << 16;
constexpr uint32_t kMaxDims = 64;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as is the format
    out_.append(b, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_string(const char* what, uint32_t max) {
    const uint32_t n = get<uint32_t>(what);
    if (n > max) fail(what, "length " + std::to_string(n) + " exceeds " + std::to_string(max));
    need(n, what);
    std::string s(data_ + at_, n);
    at_ += n;
    return s;
  }
  bool done() const { return at_ == size_; }
  [[noreturn]] void fail(const char* what, const std::string& why) const {
    throw InvalidArgument("negotiation message: " + std::string(what) + " at byte " +
                          std::to_string(at_) + ": " + why);
  }

 private:
  void need(size_t n, const char* what) const {
    if (n > size_ - at_) {
      fail(what, "needs " + std::to_string(n) + " bytes, " + std::to_string(size_ - at_) + " left");
    }
  }
  const char* data_;
  size_t size_;
  size_t at_ = 0;
};

template <typename E>
E get_enum(Reader& r, const char* what, int max) {
  const uint8_t v = r.get<uint8_t>(what);
  if (v > max)
    r.fail(what, "value " + std::to_string(v) + " out of range 0.." + std::to_string(max));
  return static_cast<E>(v);
}

}  // namespace

std::string encode_specs(const std::vector<TensorSpec>& specs) {
  Writer w;
  w.put<uint8_t>(kVersion);
  w.put<uint32_t>(static_cast<uint32_t>(specs.size()));
  for (const TensorSpec& s : specs) {
    w.put_string(s.name);
    w.put<uint8_t>(static_cast<uint8_t>(s.op));
    w.put<uint8_t>(static_cast<uint8_t>(s.dtype));
    w.put<uint8_t>(static_cast<uint8_t>(s.reduce_op));
    w.put<uint32_t>(static_cast<uint32_t>(s.shape.size()));
    for (int64_t d : s.shape) w.put<int64_t>(d);
    w.put<int32_t>(s.root);
    w.put<double>(s.prescale);
    w.put<double>(s.postscale);
    w.put<int32_t>(s.group);
    w.put<int32_t>(s.group_size);
    w.put<int32_t>(s.process_set);
    w.put<uint8_t>(static_cast<uint8_t>(s.device));
    w.put<uint8_t>(static_cast<uint8_t>(s.order.size()));
    for (uint8_t d : s.order) w.put<uint8_t>(d);
    w.put_string(s.refusal);
  }
  return w.take();
}

// A memory order: empty, or a permutation of the shape's dimensions.
void get_order(Reader& r, TensorSpec& s) {
  const uint8_t dims = r.get<uint8_t>("rank of memory order");
  if (dims != 0 && dims != s.shape.size()) {
    r.fail("memory order",
           std::to_string(dims) + " dimensions for a shape of " + std::to_string(s.shape.size()));
  }
  std::vector<bool> seen(dims, false);
  for (uint8_t k = 0; k < dims; ++k) {
    const uint8_t d = r.get<uint8_t>("memory order");
    if (d >= dims || seen[d]) r.fail("memory order", "not a permutation of the dimensions");
    seen[d] = true;
    s.order.push_back(d);
  }
}

std::vector<TensorSpec> decode_specs(const char* data, size_t size) {
  Reader r(data, size);
  const uint8_t version = r.get<uint8_t>("version");
  if (version != kVersion) r.fail("version", "unknown version " + std::to_string(version));
  const uint32_t n = r.get<uint32_t>("count");
  std::vector<TensorSpec> specs;
  for (uint32_t i = 0; i < n; ++i) {
    TensorSpec s;
    s.name = r.get_string("name", kMaxNameBytes);
    s.op = get_enum<OpType>(r, "op", static_cast<int>(OpType::kJoin));
    s.dtype = get_enum<DataType>(r, "dtype", static_cast<int>(kLastDataType));
    s.reduce_op = get_enum<ReduceOp>(r, "reduce op", static_cast<int>(ReduceOp::kAdasum));
    const uint32_t dims = r.get<uint32_t>("rank of shape");
    if (dims > kMaxDims) r.fail("rank of shape", std::to_string(dims) + " dimensions");
    for (uint32_t d = 0; d < dims; ++d) {
      const int64_t extent = r.get<int64_t>("dimension");
      if (extent < 0) r.fail("dimension", "negative extent " + std::to_string(extent));
      s.shape.push_back(extent);
    }
    s.root = r.get<int32_t>("root");
    s.prescale = r.get<double>("prescale");
    s.postscale = r.get<double>("postscale");
    // Found by fuzz_wire: a NaN scale passed decoding, then differed from itself in every
    // comparison (a "mismatch" of a tensor with itself) and would poison the reduction.
    if (!std::isfinite(s.prescale)) r.fail("prescale", "not a finite number");
    if (!std::isfinite(s.postscale)) r.fail("postscale", "not a finite number");
    s.group = r.get<int32_t>("group");
    s.group_size = r.get<int32_t>("group size");
    s.process_set = r.get<int32_t>("process set");
    s.device = get_enum<gpu::DeviceType>(r, "device", static_cast<int>(gpu::DeviceType::kCuda));
    get_order(r, s);
    s.refusal = r.get_string("refusal", kMaxNameBytes);
    specs.push_back(std::move(s));
  }
  if (!r.done()) r.fail("end", "trailing bytes after " + std::to_string(n) + " specs");
  return specs;
}

}  // namespace engine
}  // namespace tessera
