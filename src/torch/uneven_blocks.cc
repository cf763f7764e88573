#include "torch/uneven_blocks.h"

#include <numeric>
#include <string>

#include "common/error.h"

namespace tessera {
namespace detail {

std::vector<int64_t> scatter_rows(int64_t rows, int n) {
  TESSERA_CHECK(n > 0 && rows >= 0, "scatter_rows: ", rows, " rows over ", n, " ranks");
  std::vector<int64_t> counts(static_cast<size_t>(n), rows / n);
  for (int64_t r = 0; r < rows % n; ++r) ++counts[static_cast<size_t>(r)];
  return counts;
}

std::vector<int64_t> checked_splits(int64_t rows, int n, const std::vector<int64_t>& splits) {
  TESSERA_CHECK(rows >= 0, "alltoall needs a tensor with at least one dimension");
  if (splits.empty()) {
    TESSERA_CHECK(rows % n == 0, "alltoall: without splits the first dimension (", rows,
                  ") must divide by the ", n, " ranks; pass splits for uneven blocks");
    return std::vector<int64_t>(static_cast<size_t>(n), rows / n);
  }
  bool ok = splits.size() == static_cast<size_t>(n);
  for (int64_t s : splits) ok = ok && s >= 0;
  ok = ok && std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows;
  if (!ok) {
    std::string list;
    for (int64_t s : splits) list += (list.empty() ? "" : ", ") + std::to_string(s);
    throw InvalidArgument(concat("alltoall: splits [", list, "] must be ", n,
                                 " non-negative counts (one per rank of the set) adding up to the "
                                 "first dimension, ",
                                 rows));
  }
  return splits;
}

torch::Tensor pad_blocks(const torch::Tensor& t, const std::vector<int64_t>& counts,
                         int64_t block) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = block * static_cast<int64_t>(counts.size());
  torch::Tensor padded = torch::zeros(shape, t.options());
  int64_t from = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    padded.narrow(0, static_cast<int64_t>(j) * block, counts[j])
        .copy_(t.narrow(0, from, counts[j]));
    from += counts[j];
  }
  return padded;
}

torch::Tensor unpad_blocks(const torch::Tensor& t, const std::vector<int64_t>& counts,
                           int64_t block) {
  std::vector<torch::Tensor> parts;
  for (size_t j = 0; j < counts.size(); ++j) {
    parts.push_back(t.narrow(0, static_cast<int64_t>(j) * block, counts[j]));
  }
  return torch::cat(parts);
}

}  // namespace detail
}  // namespace tessera
