// The C++ side of the Python round-trip benchmark (bench/python_roundtrip.py): synchronous
// allreduces of a one-element float tensor through tessera's libtorch API, the path the Python
// extension calls. Prints one JSON line: the median and the quartiles of the per-call time.
//
//   mpirun -np 2 build/bench/allreduce_roundtrip [calls] [warmup]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/torch.h"

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::stoi(argv[1]) : 2000;
  const int warmup = argc > 2 ? std::stoi(argv[2]) : 200;
  tessera::init();
  torch::Tensor x = torch::ones({1});
  std::vector<double> us;
  for (int i = 0; i < warmup + calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    tessera::allreduce(x, "roundtrip", tessera::ReduceOp::kSum);
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  if (tessera::rank() == 0) {
    std::printf(
        "{\"side\": \"c++\", \"ranks\": %d, \"calls\": %d, \"p25_us\": %.2f, "
        "\"median_us\": %.2f, \"p75_us\": %.2f}\n",
        tessera::size(), calls, us[us.size() / 4], us[us.size() / 2], us[3 * us.size() / 4]);
  }
  tessera::shutdown();
  return 0;
}
