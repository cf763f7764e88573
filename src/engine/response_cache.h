// The response cache: after a tensor has been negotiated once through the coordinator, its
// spec is remembered under a bit index, and from then on the ranks agree that it is ready with
// one bitwise-AND allreduce over a bit vector (bit_vector.h; tessera's own allreduce on 64-bit
// words) instead of a round of messages.
//
// Every rank holds its own cache, and the caches stay identical because they change only
// through put/touch/erase called in the same order on every rank (the order of the agreed
// responses). So the name-to-bit mapping is identical everywhere without ever being sent.
// Least recently used entries are evicted at capacity; a freed bit is reused lowest first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tensor_spec.h"

namespace tessera {
namespace engine {

class ResponseCache {
 public:
  // capacity 0 turns the cache off: lookups miss and puts are ignored.
  explicit ResponseCache(size_t capacity);

  enum class State { kMiss, kHit, kInvalid };
  struct Lookup {
    State state = State::kMiss;
    int bit = -1;  // kHit and kInvalid: the entry's bit
  };
  // kHit: cached with an identical spec; kInvalid: cached under this name with another spec
  // (the tensor changed shape, dtype, ...); kMiss: not cached.
  Lookup lookup(const TensorSpec& spec) const;

  // Caches `spec` (replacing an entry of the same name) as the most recently used entry and
  // returns its bit; evicts the least recently used entry when full. -1 when the cache is off.
  int put(const TensorSpec& spec);
  // Marks an entry as just used.
  void touch(int bit);
  void erase(int bit);

  bool contains(int bit) const;
  const TensorSpec& spec(int bit) const;
  size_t size() const { return by_name_.size(); }
  // One past the highest bit in use (0 when empty): the length of the vote. Identical on every
  // rank, and compact because freed bits are reused lowest first.
  size_t bit_span() const;
  size_t capacity() const { return capacity_; }
  // Bits from least to most recently used (for tests and the stall inspector).
  std::vector<int> lru_order() const;

 private:
  struct Entry {
    TensorSpec spec;
    std::list<int>::iterator lru;  // position in lru_ (front: least recently used)
    bool used = false;
  };
  size_t capacity_;
  std::vector<Entry> entries_;  // indexed by bit
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;
  std::vector<int> free_bits_;  // kept sorted descending: back() is the lowest
};

}  // namespace engine
}  // namespace tessera
