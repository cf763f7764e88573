// Internal to src/torch: uneven blocks along dimension 0, Horovod's way, for alltoall with
// splits and reduce-scatter of a first dimension the ranks do not divide. The engine moves
// equal blocks, so uneven ones travel padded to the longest; these say how (pure, tested in
// tests/unit_torch/test_uneven_blocks.cc) and do the padding.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tessera {
namespace detail {

// Rows of each of `n` blocks when `rows` are cut: the first rows % n one longer (Horovod's
// reducescatter split).
std::vector<int64_t> scatter_rows(int64_t rows, int n);

// This rank's rows for each of `n` ranks: `splits` checked (n non-negative counts adding up to
// `rows`), or, when empty, `rows` cut evenly (it must divide). Throws InvalidArgument saying
// what is wrong and what is accepted.
std::vector<int64_t> checked_splits(int64_t rows, int n, const std::vector<int64_t>& splits);

// `t` with block j (counts[j] rows, consecutive) moved to rows [j * block, j * block +
// counts[j]) of a zero tensor of counts.size() * block rows.
torch::Tensor pad_blocks(const torch::Tensor& t, const std::vector<int64_t>& counts, int64_t block);
// The inverse for what arrived: counts[j] rows from the start of each block, concatenated.
torch::Tensor unpad_blocks(const torch::Tensor& t, const std::vector<int64_t>& counts,
                           int64_t block);

}  // namespace detail
}  // namespace tessera
