// The per-cycle vote: a fixed number of bits packed into 64-bit words, so that one bitwise-AND
// allreduce over the words (ReduceOp::kBitAnd on i64) tells every rank which bits every rank
// set. With ResNet-50's 161 cached gradients plus the status bits that is 3 words (24 bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera {
namespace engine {

class BitVector {
 public:
  explicit BitVector(size_t bits = 0) : bits_(bits), words_((bits + 63) / 64, 0) {}

  size_t size() const { return bits_; }
  void set(size_t i) { words_[i / 64] |= uint64_t{1} << (i % 64); }
  bool test(size_t i) const { return (words_[i / 64] >> (i % 64)) & 1u; }

  // The words as the allreduce sees them: int64 is the dtype with 64 bits; only the bit
  // patterns matter to AND and OR.
  int64_t* words() { return reinterpret_cast<int64_t*>(words_.data()); }
  size_t num_words() const { return words_.size(); }

 private:
  size_t bits_;
  std::vector<uint64_t> words_;
};

}  // namespace engine
}  // namespace tessera
