#include "common/agreement.h"

#include <map>
#include <sstream>
#include <utility>

namespace tessera {
namespace {

using Lines = std::vector<std::pair<std::string, std::string>>;  // key, value in order

Lines parse(const std::string& text) {
  Lines out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) {
      out.emplace_back(line, "");
    } else {
      out.emplace_back(line.substr(0, colon), line.substr(colon + 2));
    }
  }
  return out;
}

const std::string* find(const Lines& lines, const std::string& key) {
  for (const auto& kv : lines) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// The first difference between group a's lines and group b's.
std::string first_difference(const Lines& a, const std::vector<int>& ra, const Lines& b,
                             const std::vector<int>& rb) {
  const std::string on_a = ranks_phrase(ra), on_b = ranks_phrase(rb);
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string* other = find(b, a[i].first);
    if (other == nullptr) {
      return "'" + a[i].first + "' is on " + on_a + " but not on " + on_b + " (" +
             std::to_string(a.size()) + " entries vs " + std::to_string(b.size()) + ")";
    }
    if (*other != a[i].second) {
      return "'" + a[i].first + "' is " + a[i].second + " on " + on_a + " but " + *other + " on " +
             on_b;
    }
  }
  for (const auto& kv : b) {
    if (find(a, kv.first) == nullptr) {
      return "'" + kv.first + "' is on " + on_b + " but not on " + on_a + " (" +
             std::to_string(b.size()) + " entries vs " + std::to_string(a.size()) + ")";
    }
  }
  // Same keys and values in another order.
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].first != b[i].first) {
      return "entry " + std::to_string(i) + " is '" + a[i].first + "' on " + on_a + " but '" +
             b[i].first + "' on " + on_b;
    }
  }
  return "their descriptions differ between " + on_a + " and " + on_b;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string describe_disagreement(const std::vector<std::string>& by_rank) {
  // Groups of ranks with identical descriptions, in order of their first rank.
  std::vector<std::pair<const std::string*, std::vector<int>>> groups;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    bool placed = false;
    for (auto& g : groups) {
      if (*g.first == by_rank[r]) {
        g.second.push_back(static_cast<int>(r));
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({&by_rank[r], {static_cast<int>(r)}});
  }
  if (groups.size() <= 1) return "";
  const Lines first = parse(*groups[0].first);
  std::string out;
  for (size_t g = 1; g < groups.size(); ++g) {
    if (!out.empty()) out += "; ";
    out += first_difference(first, groups[0].second, parse(*groups[g].first), groups[g].second);
  }
  return out;
}

}  // namespace tessera
