// tessera._tessera's spatial side: the process grid of a partitioned model and the spatial
// autograd functions of src/spatial on its communicators (take, group sum, BatchNorm over the
// group, the C++ models' tiled convolution), for tessera.torch.spatial. The Python side decides
// which rows each layer reads (the maps); the rows move here, in the code the C++ models use.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "data/slide.h"
#include "spatial/halo_exchange.h"
#include "spatial/process_grid.h"
#include "spatial/spatial_ops.h"
#include "spatial/take.h"
#include "spatial/tile_geometry.h"

namespace py = pybind11;

namespace tessera {
namespace python {
namespace {

using spatial::ProcessGrid;

// The communicator a group operation runs over: the tiles of one image, the ranks at the same
// tile (data parallel), or every rank of the grid.
comm::Communicator& over(const ProcessGrid& g, const std::string& which) {
  TESSERA_CHECK(g.member(), "this rank is not in the spatial grid's process set");
  if (which == "spatial") return g.spatial();
  if (which == "data") return g.data();
  TESSERA_CHECK(which == "all", "a spatial group is 'spatial', 'data' or 'all', got '", which, "'");
  return g.world();
}

spatial::AxisMap axis_map(int64_t in, std::vector<std::vector<int64_t>> src) {
  spatial::AxisMap m;
  m.in = in;
  m.src = std::move(src);
  return m;
}

// Grids live until the process ends, one per (grid, members): freeing a communicator that holds
// a shared-memory window is collective, and Python frees objects at moments that differ between
// ranks (garbage cycles, a test runner's tracebacks), which hung a rank freeing a grid against
// one making the next. Every rank asks for grids in the same order, so each is made once, by all.
std::shared_ptr<ProcessGrid> grid_for(const std::string& grid, std::vector<int> members) {
  static std::mutex mu;
  static auto* grids =
      new std::map<std::pair<std::string, std::vector<int>>, std::shared_ptr<ProcessGrid>>();
  std::sort(members.begin(), members.end());
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(grid, members);
  const auto it = grids->find(key);
  if (it != grids->end()) return it->second;
  auto made = std::make_shared<ProcessGrid>(grid, members);
  grids->emplace(key, made);
  return made;
}

void bind_grid(py::module_& m) {
  py::class_<ProcessGrid, std::shared_ptr<ProcessGrid>>(m, "SpatialGrid")
      .def(py::init([](const std::string& grid, const std::vector<int>& members) {
             py::gil_scoped_release release;
             return grid_for(grid, members);
           }),
           py::arg("grid"), py::arg("members"))
      .def_property_readonly("member", &ProcessGrid::member)
      .def_property_readonly("shape",
                             [](const ProcessGrid& g) {
                               return py::make_tuple(g.shape().data, g.shape().h, g.shape().w);
                             })
      .def_property_readonly("coord", [](const ProcessGrid& g) {
        return py::make_tuple(g.coord().data, g.coord().h, g.coord().w);
      });
}

void bind_ops(py::module_& m) {
  m.def(
      "spatial_take",
      [](const ProcessGrid& g, const torch::Tensor& tile, int64_t rows_in,
         std::vector<std::vector<int64_t>> rows, int64_t cols_in,
         std::vector<std::vector<int64_t>> cols, double fill) {
        return spatial::spatial_take(tile, axis_map(rows_in, std::move(rows)),
                                     axis_map(cols_in, std::move(cols)), g.coord().h, g.coord().w,
                                     fill, over(g, "spatial"));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "spatial_group_sum",
      [](const ProcessGrid& g, const torch::Tensor& x, const std::string& which) {
        return spatial::group_sum(x, over(g, which));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "spatial_batch_norm",
      [](const ProcessGrid& g, const torch::Tensor& x, const torch::Tensor& weight,
         const torch::Tensor& bias, const torch::Tensor& running_mean,
         const torch::Tensor& running_var, double momentum, double eps, const std::string& which) {
        return spatial::spatial_batch_norm(x, weight, bias, running_mean, running_var, momentum,
                                           eps, over(g, which));
      },
      py::call_guard<py::gil_scoped_release>());
  // The C++ models' convolution (equal tiles, neighbour halos, square windows): the partitioner
  // takes it where spatial_conv_problem says it applies.
  m.def(
      "spatial_conv2d",
      [](const ProcessGrid& g, const torch::Tensor& tile, const torch::Tensor& weight,
         const std::optional<torch::Tensor>& bias, int64_t stride, int64_t padding,
         int64_t dilation) {
        TESSERA_CHECK(g.member(), "this rank is not in the spatial grid's process set");
        return spatial::spatial_conv2d(tile, weight, bias.value_or(torch::Tensor()), stride,
                                       padding, dilation, g.space());
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("spatial_conv_problem", [](int64_t n, int parts, int64_t kernel, int64_t stride,
                                   int64_t dilation, int64_t padding) {
    return spatial::axis_problem(n, parts, spatial::WindowSpec{kernel, stride, dilation, padding});
  });
  m.def("spatial_seconds", [] {
    return py::make_tuple(spatial::halo_exchange_seconds() + spatial::take_seconds(),
                          spatial::group_sum_seconds());
  });
}

// The slide reader of tessera train --spatial: a rank decodes only the TIFF tiles under its tile.
void bind_slides(py::module_& m) {
  py::class_<data::SlideReader>(m, "SlideReader")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("height", &data::SlideReader::height)
      .def_property_readonly("width", &data::SlideReader::width)
      .def_property_readonly("tiled", &data::SlideReader::tiled)
      .def("read_region", &data::SlideReader::read_region, py::arg("y"), py::arg("x"), py::arg("h"),
           py::arg("w"), py::call_guard<py::gil_scoped_release>());
  // fill(y, x, h, w) returns the tile's pixels as a [h, w, 3] uint8 tensor.
  m.def("write_tiled_tiff", [](const std::string& path, int64_t height, int64_t width, int64_t tile,
                               const py::function& fill) {
    data::write_tiled_tiff(
        path, height, width, tile, [&](int64_t y, int64_t x, int64_t h, int64_t w, uint8_t* out) {
          const torch::Tensor t = fill(y, x, h, w).cast<torch::Tensor>().contiguous();
          TESSERA_CHECK(t.scalar_type() == torch::kByte && t.numel() == h * w * 3,
                        "write_tiled_tiff: fill must return [", h, ", ", w,
                        ", 3] uint8 pixels, got ", t.sizes(), " ", t.scalar_type());
          std::memcpy(out, t.data_ptr(), static_cast<size_t>(h * w * 3));
        });
  });
}

}  // namespace

void bind_spatial(py::module_& m) {
  bind_grid(m);
  bind_ops(m);
  bind_slides(m);
}

}  // namespace python
}  // namespace tessera
