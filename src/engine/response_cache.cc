#include "engine/response_cache.h"

#include <algorithm>
#include <functional>

#include "common/error.h"

namespace tessera {
namespace engine {

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity), entries_(capacity) {
  free_bits_.reserve(capacity);
  for (size_t b = capacity; b-- > 0;) free_bits_.push_back(static_cast<int>(b));
}

ResponseCache::Lookup ResponseCache::lookup(const TensorSpec& spec) const {
  const auto it = by_name_.find(spec.name);
  if (it == by_name_.end()) return {};
  const Entry& e = entries_[static_cast<size_t>(it->second)];
  return {spec_difference(e.spec, spec).empty() ? State::kHit : State::kInvalid, it->second};
}

int ResponseCache::put(const TensorSpec& spec) {
  if (capacity_ == 0) return -1;
  const auto it = by_name_.find(spec.name);
  if (it != by_name_.end()) {
    // Same name: replace the spec in place, keep the bit.
    Entry& e = entries_[static_cast<size_t>(it->second)];
    e.spec = spec;
    touch(it->second);
    return it->second;
  }
  if (free_bits_.empty()) erase(lru_.front());
  const int bit = free_bits_.back();
  free_bits_.pop_back();
  Entry& e = entries_[static_cast<size_t>(bit)];
  e.spec = spec;
  e.used = true;
  e.lru = lru_.insert(lru_.end(), bit);
  by_name_.emplace(spec.name, bit);
  return bit;
}

void ResponseCache::touch(int bit) {
  TESSERA_ASSERT(contains(bit), "touch of an empty cache bit ", bit);
  Entry& e = entries_[static_cast<size_t>(bit)];
  lru_.splice(lru_.end(), lru_, e.lru);
}

void ResponseCache::erase(int bit) {
  TESSERA_ASSERT(contains(bit), "erase of an empty cache bit ", bit);
  Entry& e = entries_[static_cast<size_t>(bit)];
  lru_.erase(e.lru);
  by_name_.erase(e.spec.name);
  e = Entry{};
  // Keep free bits sorted descending so that back() is always the lowest free bit.
  free_bits_.insert(
      std::upper_bound(free_bits_.begin(), free_bits_.end(), bit, std::greater<int>()), bit);
}

bool ResponseCache::contains(int bit) const {
  return bit >= 0 && static_cast<size_t>(bit) < capacity_ &&
         entries_[static_cast<size_t>(bit)].used;
}

const TensorSpec& ResponseCache::spec(int bit) const {
  TESSERA_ASSERT(contains(bit), "no cache entry at bit ", bit);
  return entries_[static_cast<size_t>(bit)].spec;
}

size_t ResponseCache::bit_span() const {
  for (size_t b = capacity_; b > 0; --b) {
    if (entries_[b - 1].used) return b;
  }
  return 0;
}

std::vector<int> ResponseCache::lru_order() const { return {lru_.begin(), lru_.end()}; }

}  // namespace engine
}  // namespace tessera
