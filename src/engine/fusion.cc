#include "engine/fusion.h"

#include <map>

#include "common/error.h"

namespace tessera {
namespace engine {
namespace {

// A unit is what fusion never splits: one tensor, or all members of a group.
struct Unit {
  std::vector<size_t> items;
  size_t bytes = 0;
};

std::vector<Unit> units_of(const std::vector<const TensorSpec*>& ready) {
  std::vector<Unit> units;
  std::map<std::pair<int, int>, size_t> group_unit;  // (process set, group) -> unit index
  for (size_t i = 0; i < ready.size(); ++i) {
    const TensorSpec& s = *ready[i];
    size_t u = units.size();
    if (s.group >= 0) {
      const auto key = std::make_pair(s.process_set, s.group);
      const auto it = group_unit.find(key);
      if (it != group_unit.end()) {
        u = it->second;
      } else {
        group_unit.emplace(key, u);
      }
    }
    if (u == units.size()) units.emplace_back();
    units[u].items.push_back(i);
    units[u].bytes += s.bytes();
  }
  return units;
}

bool unit_fusable(const std::vector<const TensorSpec*>& ready, const Unit& u,
                  const TensorSpec& lead) {
  for (size_t i : u.items) {
    if (!fusable(*ready[i], lead)) return false;
  }
  return true;
}

}  // namespace

std::vector<FusionBatch> plan_fusion(const std::vector<const TensorSpec*>& ready,
                                     size_t threshold) {
  const std::vector<Unit> units = units_of(ready);
  std::vector<bool> placed(units.size(), false);
  std::vector<FusionBatch> batches;
  for (size_t u = 0; u < units.size(); ++u) {
    if (placed[u]) continue;
    placed[u] = true;
    const Unit& unit = units[u];
    const TensorSpec& lead = *ready[unit.items.front()];
    const bool can_fuse =
        threshold > 0 && unit_fusable(ready, unit, lead) && lead.op == OpType::kAllreduce;
    if (unit.bytes > threshold || !can_fuse) {
      // Too large (or not fusable): the unit's members fill batches of their own, in order.
      FusionBatch b;
      for (size_t i : unit.items) {
        const size_t bytes = ready[i]->bytes();
        if (!b.items.empty() && (!can_fuse || b.bytes + bytes > threshold)) {
          batches.push_back(std::move(b));
          b = FusionBatch{};
        }
        b.items.push_back(i);
        b.bytes += bytes;
      }
      batches.push_back(std::move(b));
      continue;
    }
    FusionBatch b{unit.items, unit.bytes};
    for (size_t v = u + 1; v < units.size() && b.bytes < threshold; ++v) {
      if (placed[v] || units[v].bytes > threshold - b.bytes) continue;
      if (!unit_fusable(ready, units[v], lead)) continue;
      placed[v] = true;
      b.items.insert(b.items.end(), units[v].items.begin(), units[v].items.end());
      b.bytes += units[v].bytes;
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

std::vector<FusionBatch> plan_fusion(const std::vector<TensorSpec>& ready, size_t threshold) {
  std::vector<const TensorSpec*> refs;
  refs.reserve(ready.size());
  for (const TensorSpec& s : ready) refs.push_back(&s);
  return plan_fusion(refs, threshold);
}

FusionLayout fusion_layout(const std::vector<size_t>& bytes, size_t align) {
  TESSERA_CHECK(align > 0 && (align & (align - 1)) == 0, "fusion alignment ", align,
                " is not a power of two");
  FusionLayout layout;
  layout.offsets.reserve(bytes.size());
  for (size_t b : bytes) {
    layout.offsets.push_back(layout.total);
    layout.total += (b + align - 1) / align * align;
  }
  return layout;
}

}  // namespace engine
}  // namespace tessera
