#include "tune/model_gradients.h"

namespace tessera {
namespace tune {

std::vector<size_t> resnet50_parameter_elements() {
  std::vector<size_t> out;
  auto conv = [&](size_t in, size_t outc, size_t k) { out.push_back(in * outc * k * k); };
  auto bn = [&](size_t c) {  // weight and bias
    out.push_back(c);
    out.push_back(c);
  };
  conv(3, 64, 7);
  bn(64);
  size_t in = 64;
  const size_t blocks[] = {3, 4, 6, 3};
  for (size_t stage = 0; stage < 4; ++stage) {
    const size_t width = size_t{64} << stage;
    for (size_t b = 0; b < blocks[stage]; ++b) {
      conv(in, width, 1);
      bn(width);
      conv(width, width, 3);
      bn(width);
      conv(width, 4 * width, 1);
      bn(4 * width);
      if (b == 0) {  // the projection shortcut
        conv(in, 4 * width, 1);
        bn(4 * width);
      }
      in = 4 * width;
    }
  }
  out.push_back(in * 1000);  // fc weight, bias
  out.push_back(1000);
  return out;
}

}  // namespace tune
}  // namespace tessera
