// The conformance cases of tests/conformance/cases.json through the C++ front end
// (include/tessera/torch.h): every case × dtype × each form the API offers (synchronous,
// asynchronous, in place) on its process set, against the results the case gives.
// tests/python/test_conformance.py runs the same file through tessera.torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi/torch_test_util.h"
#include "tessera/torch.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::TorchTest;
using Tensors = std::vector<torch::Tensor>;

const std::map<std::string, torch::ScalarType>& dtypes() {
  static const std::map<std::string, torch::ScalarType> m = {
      {"uint8", torch::kUInt8},       {"int8", torch::kInt8},     {"int16", torch::kInt16},
      {"int32", torch::kInt32},       {"int64", torch::kInt64},   {"float16", torch::kHalf},
      {"bfloat16", torch::kBFloat16}, {"float32", torch::kFloat}, {"float64", torch::kDouble}};
  return m;
}

const std::map<std::string, ReduceOp>& reduce_ops() {
  static const std::map<std::string, ReduceOp> m = {{"Sum", ReduceOp::kSum},
                                                    {"Average", ReduceOp::kAverage},
                                                    {"Min", ReduceOp::kMin},
                                                    {"Max", ReduceOp::kMax},
                                                    {"Product", ReduceOp::kProduct}};
  return m;
}

// The case's input on global rank r, member m: element i = a + b*r + c*i + 10*m.
torch::Tensor input(const json& c, int r, int m, int64_t rows, torch::ScalarType dtype) {
  const double a = c["value"][0], b = c["value"][1], k = c["value"][2];
  const int64_t cols = c["cols"];
  torch::Tensor i = torch::arange(rows * cols, torch::kDouble).reshape({rows, cols});
  return (a + b * r + 10.0 * m + k * i).to(dtype);
}

torch::Tensor expected(const json& rows2d, int64_t cols) {
  std::vector<double> flat;
  for (const json& row : rows2d)
    for (const json& v : row) flat.push_back(v);
  const int64_t rows = static_cast<int64_t>(rows2d.size());
  return torch::tensor(flat, torch::kDouble).reshape({rows, cols});
}

// Whether `got` is the expected result: dtype kept, shape equal, values exact for integers
// and within the dtype's precision for floating ones.
::testing::AssertionResult matches(const torch::Tensor& got, const torch::Tensor& want,
                                   torch::ScalarType dtype) {
  if (got.scalar_type() != dtype) return ::testing::AssertionFailure() << "dtype " << got.dtype();
  if (got.sizes() != want.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " want " << want.sizes();
  const double tol = dtype == torch::kHalf || dtype == torch::kBFloat16 ? 1e-2
                     : dtype == torch::kFloat                           ? 1e-6
                                                                        : 1e-12;
  if (torch::allclose(got.to(torch::kDouble), want, tol, tol)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << "\nwant\n" << want;
}

Tensors wait_all(std::vector<TensorHandle> hs) {
  Tensors out;
  for (TensorHandle& h : hs) out.push_back(synchronize(h));
  return out;
}

Tensors wait_one(TensorHandle h) { return {synchronize(h)}; }

// The forms of one op (each returns the members' results): which exist depends on the op.
struct Form {
  std::string name;
  std::function<Tensors(Tensors)> run;
};

std::vector<Form> allreduce_forms(const json& c, int ps) {
  const ReduceOp op = reduce_ops().at(c["reduce"]);
  const double pre = c.value("prescale", 1.0), post = c.value("postscale", 1.0);
  std::vector<Form> forms = {
      {"sync", [=](Tensors t) { return Tensors{allreduce(t[0], "", op, pre, post, ps)}; }},
      {"async", [=](Tensors t) { return wait_one(allreduce_async(t[0], "", op, pre, post, ps)); }},
      {"async_", [=](Tensors t) {
         wait_one(allreduce_async_(t[0], "", op, pre, post, ps));
         return t;
       }}};
  if (pre == 1.0 && post == 1.0) {  // allreduce_ takes no factors
    forms.push_back({"sync_", [=](Tensors t) { return Tensors{allreduce_(t[0], "", op, ps)}; }});
  }
  return forms;
}

std::vector<Form> grouped_allreduce_forms(const json& c, int ps) {
  const ReduceOp op = reduce_ops().at(c["reduce"]);
  const std::string id = c["id"];
  return {{"sync", [=](Tensors t) { return grouped_allreduce(t, "", op, ps); }},
          {"async", [=](Tensors t) { return wait_all(grouped_allreduce_async(t, "", op, ps)); }},
          {"async_", [=](Tensors t) {
             std::vector<std::string> names;  // the in-place form takes the caller's names
             for (size_t i = 0; i < t.size(); ++i)
               names.push_back(id + ".inplace." + std::to_string(i));
             wait_all(grouped_allreduce_async_(t, names, op, 1.0, 1.0, ps));
             return t;
           }}};
}

std::vector<Form> forms_of(const json& c, const json& s, int ps, int me) {
  const std::string op = c["op"];
  if (op == "allreduce") return allreduce_forms(c, ps);
  if (op == "grouped_allreduce") return grouped_allreduce_forms(c, ps);
  if (op == "allgather") {
    return {{"sync", [=](Tensors t) { return Tensors{allgather(t[0], "", ps)}; }},
            {"async", [=](Tensors t) { return wait_one(allgather_async(t[0], "", ps)); }}};
  }
  if (op == "grouped_allgather")
    return {{"async", [=](Tensors t) { return wait_all(grouped_allgather_async(t, "", ps)); }}};
  if (op == "broadcast") {
    const int root = s["root"];
    return {{"sync", [=](Tensors t) { return Tensors{broadcast(t[0], root, "", ps)}; }},
            {"async", [=](Tensors t) { return wait_one(broadcast_async(t[0], root, "", ps)); }},
            {"sync_", [=](Tensors t) { return Tensors{broadcast_(t[0], root, "", ps)}; }},
            {"async_", [=](Tensors t) {
               wait_one(broadcast_async_(t[0], root, "", ps));
               return t;
             }}};
  }
  if (op == "alltoall") {
    const bool pass = c.value("pass_splits", true);
    const std::vector<int64_t> splits =
        pass ? s["splits"][me].get<std::vector<int64_t>>() : std::vector<int64_t>{};
    std::vector<Form> forms = {
        {"async", [=](Tensors t) { return wait_one(alltoall_async(t[0], "", ps, splits)); }}};
    if (!pass)
      forms.push_back({"sync", [=](Tensors t) { return Tensors{alltoall(t[0], "", ps)}; }});
    return forms;
  }
  const ReduceOp rop = reduce_ops().at(c["reduce"]);
  const double pre = c.value("prescale", 1.0), post = c.value("postscale", 1.0);
  if (op == "reducescatter") {
    return {{"async", [=](Tensors t) {
               return wait_one(reducescatter_async(t[0], "", rop, ps, pre, post));
             }}};
  }
  EXPECT_EQ(op, "grouped_reducescatter");
  return {{"async", [=](Tensors t) {
             return wait_all(grouped_reducescatter_async(t, "", rop, ps, pre, post));
           }}};
}

// Runs one case at this world size on every rank of its set (the others only take part in
// making and removing the set, which is collective).
void run_case(const json& c, const json& s, int n, int me) {
  std::vector<int> set;
  for (int r = 0; r < n; ++r) set.push_back(r);
  if (s.contains("set")) set = s["set"].get<std::vector<int>>();
  const bool world = static_cast<int>(set.size()) == n && s.contains("set") == false;
  const int ps = world ? 0 : add_process_set(set);
  const auto at = std::find(set.begin(), set.end(), me);
  if (at != set.end()) {
    const size_t q = static_cast<size_t>(at - set.begin());
    const int members = c.value("members", 1);
    for (const std::string& dtype_name : c["dtypes"]) {
      const torch::ScalarType dtype = dtypes().at(dtype_name);
      for (const Form& form : forms_of(c, s, ps, me)) {
        Tensors ins;
        for (int m = 0; m < members; ++m) ins.push_back(input(c, me, m, s["rows"][me], dtype));
        const Tensors outs = form.run(ins);
        ASSERT_EQ(outs.size(), static_cast<size_t>(members));
        for (int m = 0; m < members; ++m) {
          EXPECT_TRUE(matches(outs[m], expected(s["expect"][q][m], c["cols"]), dtype))
              << c["id"] << " " << dtype_name << " " << form.name << " member " << m << " rank "
              << me << " of " << n;
        }
      }
    }
  }
  if (!world) remove_process_set(ps);
}

json load_cases() {
  std::ifstream in(TESSERA_CONFORMANCE_CASES);
  EXPECT_TRUE(in.good()) << "cannot read " << TESSERA_CONFORMANCE_CASES;
  return json::parse(in)["cases"];
}

TEST_F(TorchTest, EveryConformanceCaseThroughTheCppFrontEnd) {
  int ran = 0;
  for (const json& c : load_cases()) {
    const std::string size = std::to_string(n());
    if (!c["sizes"].contains(size)) continue;
    run_case(c, c["sizes"][size], n(), r());
    ++ran;
  }
  EXPECT_GT(ran, n() == 1 ? 15 : 20) << "cases run at " << n() << " ranks";
}

}  // namespace
}  // namespace tessera
