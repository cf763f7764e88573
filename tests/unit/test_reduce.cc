// Reduction kernels against a scalar reference, for every dtype and op, odd lengths (the
// vector tails), aliasing, and the rounding of f16 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "common/reduce.h"

namespace tessera {
namespace {

const std::vector<DataType> kDtypes = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                       DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};

double ref(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kBitAnd:
      return static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b));
    case ReduceOp::kBitOr:
      return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b));
  }
  return 0;
}

TEST(Reduce, MatchesScalarReferenceOnEveryDtypeAndOp) {
  for (DataType dt : kDtypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                        ReduceOp::kBitAnd, ReduceOp::kBitOr}) {
      const bool bitwise = op == ReduceOp::kBitAnd || op == ReduceOp::kBitOr;
      if (bitwise && is_floating(dt)) continue;
      for (size_t count : {0ul, 1ul, 3ul, 15ul, 16ul, 17ul, 63ul, 64ul, 65ul, 1000ul, 4099ul}) {
        const size_t es = dtype_size(dt);
        std::vector<char> a(count * es + 1), b(count * es + 1), out(count * es + 1);
        for (size_t i = 0; i < count; ++i) {
          // Small values so that products and sums stay exact in every dtype.
          // Bitwise ops get values that use all eight low bits.
          store_from_double(dt, a.data(), i,
                            static_cast<double>(bitwise ? (i * 37 + 11) % 251 : i % 9));
          store_from_double(dt, b.data(), i,
                            static_cast<double>(bitwise ? (i * 91 + 5) % 253 : (i * 5 + 3) % 7));
        }
        reduce(dt, op, a.data(), b.data(), out.data(), count);
        for (size_t i = 0; i < count; ++i) {
          const double want =
              ref(op, load_as_double(dt, a.data(), i), load_as_double(dt, b.data(), i));
          ASSERT_EQ(load_as_double(dt, out.data(), i), want)
              << dtype_name(dt) << " " << reduce_op_name(op) << " count " << count << " i " << i;
        }
        // In place (out aliases a): same result.
        reduce(dt, op, a.data(), b.data(), a.data(), count);
        EXPECT_EQ(std::memcmp(a.data(), out.data(), count * es), 0) << dtype_name(dt);
      }
    }
  }
}

TEST(Reduce, HalfTypesAccumulateInF32AndRoundToNearestEven) {
  // f16 has spacing 2 from 2048 on, bf16 from 256 on: x + 1 and x + 3 are ties, which go to
  // the even mantissa (x and x + 4).
  struct Tie {
    DataType dtype;
    uint16_t (*to)(float);
    float (*from)(uint16_t);
    float x;
  };
  for (const Tie& t : {Tie{DataType::kFloat16, float_to_f16, f16_to_float, 2048.0f},
                       Tie{DataType::kBFloat16, float_to_bf16, bf16_to_float, 256.0f}}) {
    const uint16_t x = t.to(t.x), one = t.to(1.0f), three = t.to(3.0f);
    uint16_t out = 0;
    reduce(t.dtype, ReduceOp::kSum, &x, &one, &out, 1);
    EXPECT_EQ(t.from(out), t.x) << dtype_name(t.dtype);
    reduce(t.dtype, ReduceOp::kSum, &x, &three, &out, 1);
    EXPECT_EQ(t.from(out), t.x + 4) << dtype_name(t.dtype);
  }
  // NaN stays NaN in bf16 instead of rounding to infinity.
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A vector long enough for the SIMD path agrees with the scalar conversion everywhere.
  struct Half {
    DataType dtype;
    uint16_t (*to)(float);
    float (*from)(uint16_t);
  };
  for (const Half& h : {Half{DataType::kBFloat16, float_to_bf16, bf16_to_float},
                        Half{DataType::kFloat16, float_to_f16, f16_to_float}}) {
    std::vector<uint16_t> x(1001), y(1001), z(1001);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = h.to(static_cast<float>(i) * 0.37f);
      y[i] = h.to(static_cast<float>(i) * -1.13f + 5);
    }
    reduce(h.dtype, ReduceOp::kSum, x.data(), y.data(), z.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(z[i], h.to(h.from(x[i]) + h.from(y[i]))) << dtype_name(h.dtype) << " " << i;
    }
  }
}

TEST(Reduce, ScaleFloatsAndTruncateIntegersAsHorovod) {
  std::vector<float> v = {2, 4, 6};
  scale(DataType::kFloat32, 0.5, v.data(), v.data(), 3);
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
  std::vector<uint16_t> h = {float_to_f16(3.0f)};
  scale(DataType::kFloat16, 1.0 / 3.0, h.data(), h.data(), 1);
  EXPECT_EQ(f16_to_float(h[0]), 1.0f);
  // Integers: scaled in double and truncated toward zero (Horovod's ScaleBufferCPUImpl),
  // saturating at the type's range rather than overflowing.
  std::vector<int32_t> i = {5, -5, 7, 1, 2000000000};
  scale(DataType::kInt32, 0.5, i.data(), i.data(), i.size());
  EXPECT_EQ(i, (std::vector<int32_t>{2, -2, 3, 0, 1000000000}));
  std::vector<int64_t> l = {3, -7};
  scale(DataType::kInt64, 1.0 / 3.0, l.data(), l.data(), 2);
  EXPECT_EQ(l, (std::vector<int64_t>{1, -2}));
  std::vector<uint8_t> u = {200, 3};
  scale(DataType::kUInt8, 2.0, u.data(), u.data(), 2);
  EXPECT_EQ(u, (std::vector<uint8_t>{255, 6}));
  std::vector<int8_t> b = {-100, 9};
  scale(DataType::kInt8, 2.0, b.data(), b.data(), 2);
  EXPECT_EQ(b, (std::vector<int8_t>{-128, 18}));
  std::vector<int16_t> w = {-3};
  scale(DataType::kInt16, 0.5, w.data(), w.data(), 1);
  EXPECT_EQ(w, (std::vector<int16_t>{-1}));
}

TEST(Reduce, DispatchPicksAKnownIsa) {
  const std::string isa = reduce_isa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "baseline") << isa;
}

TEST(Dtype, NamesRoundTripAndBadInputSaysWhatIsAccepted) {
  for (DataType dt : kDtypes) EXPECT_EQ(parse_dtype(dtype_name(dt)), dt);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: f32 f64 f16 bf16 i32 i64 u8"),
              std::string::npos);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct, ReduceOp::kBitAnd, ReduceOp::kBitOr}) {
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_THROW(parse_reduce_op("xor"), InvalidArgument);
  for (DataType dt :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    EXPECT_THROW(check_op_supported(dt, ReduceOp::kBitAnd), InvalidArgument) << dtype_name(dt);
    EXPECT_THROW(check_op_supported(dt, ReduceOp::kBitOr), InvalidArgument) << dtype_name(dt);
  }
  check_op_supported(DataType::kUInt8, ReduceOp::kBitAnd);
  check_op_supported(DataType::kInt64, ReduceOp::kBitOr);
  EXPECT_THROW(check_op_supported(DataType::kInt64, ReduceOp::kAverage), InvalidArgument);
  check_op_supported(DataType::kBFloat16, ReduceOp::kAverage);
  EXPECT_THROW(checked_bytes(std::numeric_limits<size_t>::max() / 2, DataType::kInt32),
               InvalidArgument);
  EXPECT_EQ(checked_bytes(10, DataType::kFloat64), 80u);
  // Integers wrap like the dtype does.
  uint8_t u = 0;
  store_from_double(DataType::kUInt8, &u, 0, 260);
  EXPECT_EQ(u, 4);
  int8_t c = 0;
  store_from_double(DataType::kInt8, &c, 0, 130);
  EXPECT_EQ(c, -126);
  int16_t h = 0;
  store_from_double(DataType::kInt16, &h, 0, -32769);
  EXPECT_EQ(h, 32767);
}

}  // namespace
}  // namespace tessera
