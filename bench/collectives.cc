#include "bench/collectives.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/collectives.h"
#include "comm/selector.h"
#include "common/error.h"
#include "common/reduce.h"
#include "common/stats.h"

namespace tessera {
namespace bench {
namespace {

using comm::Algorithm;
using comm::Communicator;
using Clock = std::chrono::steady_clock;

struct Buffer {
  std::unique_ptr<char, void (*)(void*)> p{nullptr, std::free};
  explicit Buffer(size_t bytes) {
    void* q = nullptr;
    if (posix_memalign(&q, 64, std::max<size_t>(bytes, 64)) != 0) throw Error("out of memory");
    std::memset(q, 0, std::max<size_t>(bytes, 64));  // first touch now, not in the timed loop
    p.reset(static_cast<char*>(q));
  }
  char* get() const { return p.get(); }
};

}  // namespace

double input_value(int r, size_t i) { return (r + 1) * static_cast<double>(i % 5 + 1); }

double expected_allreduce(ReduceOp op, int n, size_t i) {
  const double k = static_cast<double>(i % 5 + 1);
  switch (op) {
    case ReduceOp::kSum:
      return k * n * (n + 1) / 2.0;
    case ReduceOp::kAverage:
      return k * (n + 1) / 2.0;
    case ReduceOp::kMin:
      return k;
    case ReduceOp::kMax:
      return k * n;
    case ReduceOp::kProduct: {
      double v = 1;
      for (int r = 0; r < n; ++r) v *= (r + 1) * k;
      return v;
    }
    case ReduceOp::kBitAnd:
    case ReduceOp::kBitOr: {
      // Bitwise ops commute with the dtype's truncation to its low bits, so int64 is exact.
      int64_t v = op == ReduceOp::kBitAnd ? -1 : 0;
      for (int r = 0; r < n; ++r) {
        const int64_t x = static_cast<int64_t>((r + 1) * k);
        v = op == ReduceOp::kBitAnd ? (v & x) : (v | x);
      }
      return static_cast<double>(v);
    }
  }
  return 0;
}

long count_wrong(DataType dtype, const void* data, size_t count,
                 const std::function<double(size_t)>& expected) {
  long wrong = 0;
  std::unique_ptr<char[]> one(new char[8]);
  for (size_t i = 0; i < count; ++i) {
    const double got = load_as_double(dtype, data, i);
    store_from_double(dtype, one.get(), 0, expected(i));
    const double want = load_as_double(dtype, one.get(), 0);
    const bool half = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
    const double tol =
        half ? 1e-2 * std::fabs(want) : (is_floating(dtype) ? 1e-6 * std::fabs(want) : 0);
    if (!(std::fabs(got - want) <= tol)) ++wrong;
  }
  return wrong;
}

namespace {

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string algo;
  double time_us = 0;
  double algbw = 0;  // GB/s
  double busbw = 0;  // GB/s
  long wrong = 0;
  double vs_mpi = 0;  // MPI's time / this time (> 1: faster than MPI)
};

}  // namespace

double time_calls(Communicator& world, int warmup, int iterations,
                  const std::function<void()>& fn) {
  comm::AllreduceOptions max;
  max.op = ReduceOp::kMax;
  max.algorithm = Algorithm::kMpi;
  double estimate = 0;
  for (int i = 0; i < std::max(1, warmup); ++i) {
    const auto t0 = Clock::now();
    fn();
    estimate = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  comm::allreduce(world, &estimate, &estimate, 1, DataType::kFloat64, max);
  const int batch =
      static_cast<int>(std::clamp(std::ceil(50.0 / std::max(estimate, 1e-3)), 1.0, 1000.0));
  comm::barrier(world);
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    for (int j = 0; j < batch; ++j) fn();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / batch);
  }
  double mid = median(us);
  comm::allreduce(world, &mid, &mid, 1, DataType::kFloat64, max);
  return mid;
}

std::vector<size_t> sizes(const BenchOptions& o, size_t granule) {
  std::vector<size_t> out;
  TESSERA_CHECK(o.factor > 1.0, "-f/--factor must be > 1, got ", o.factor);
  TESSERA_CHECK(o.min_bytes <= o.max_bytes, "-b must not exceed -e");
  for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0001;
       b *= o.factor) {
    size_t bytes = static_cast<size_t>(b) / granule * granule;
    if (bytes == 0) bytes = granule;
    if (out.empty() || out.back() != bytes) out.push_back(bytes);
  }
  return out;
}

double bus_factor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // allgather, reduce-scatter, alltoall
}

namespace {

std::vector<std::string> algorithm_list(const BenchOptions& o) {
  std::vector<std::string> names;
  if (o.collective != "allreduce") return {"tessera", "mpi"};
  for (const std::string& a : o.algorithms) {
    if (a == "all") {
      for (Algorithm x : comm::all_algorithms()) names.push_back(comm::algorithm_name(x));
      names.push_back("auto");
    } else {
      comm::parse_algorithm(a);  // validates
      names.push_back(a);
    }
  }
  // MPI is the reference of every ratio: always measure it.
  if (std::find(names.begin(), names.end(), "mpi") == names.end()) names.push_back("mpi");
  return names;
}

// One collective's call at one size: what runs, what it must produce, where to check it.
struct Call {
  std::function<void()> fn;
  std::function<double(size_t)> expect;
  size_t count = 0;        // elements per rank the row reports
  size_t check_count = 0;  // elements of `checked` to compare with expect
  char* checked = nullptr;
};

Call allreduce_call(const BenchOptions& o, Communicator& world, const std::string& algo,
                    size_t bytes, char* send, char* recv) {
  Call c;
  const DataType dt = o.dtype;
  c.count = c.check_count = bytes / dtype_size(dt);
  for (size_t i = 0; i < c.count; ++i) store_from_double(dt, send, i, input_value(world.rank(), i));
  comm::AllreduceOptions opts;
  opts.op = o.op;
  opts.algorithm = comm::parse_algorithm(algo);
  const size_t count = c.count;
  c.fn = [&world, send, recv, count, dt, opts] {
    comm::allreduce(world, send, recv, count, dt, opts);
  };
  c.expect = [op = o.op, n = world.size()](size_t i) { return expected_allreduce(op, n, i); };
  c.checked = recv;
  return c;
}

// `bytes` is the gathered total.
Call allgather_call(const BenchOptions& o, Communicator& world, const std::string& algo,
                    size_t bytes, char* send, char* recv) {
  Call c;
  const DataType dt = o.dtype;
  const size_t count = bytes / dtype_size(dt) / static_cast<size_t>(world.size());
  c.count = count;
  c.check_count = count * static_cast<size_t>(world.size());
  for (size_t i = 0; i < count; ++i) store_from_double(dt, send, i, input_value(world.rank(), i));
  if (algo == "mpi") {
    c.fn = [&world, send, recv, count, dt] {
      comm::mpi_reference::allgather(world, send, recv, count, dt);
    };
  } else {
    c.fn = [&world, send, recv, count, dt] { comm::allgather(world, send, recv, count, dt); };
  }
  c.expect = [count](size_t i) { return input_value(static_cast<int>(i / count), i % count); };
  c.checked = recv;
  return c;
}

Call broadcast_call(const BenchOptions& o, Communicator& world, const std::string& algo,
                    size_t bytes, char* send) {
  Call c;
  const DataType dt = o.dtype;
  const size_t count = bytes / dtype_size(dt);
  c.count = c.check_count = count;
  c.fn = [&world, send, count, dt, algo] {
    if (algo == "mpi")
      comm::mpi_reference::broadcast(world, send, count, dt, 0);
    else
      comm::broadcast(world, send, count, dt, 0);
  };
  if (world.rank() == 0) {
    for (size_t i = 0; i < count; ++i) store_from_double(dt, send, i, input_value(0, i));
  } else {
    std::memset(send, 0, bytes);
  }
  c.expect = [](size_t i) { return input_value(0, i); };
  c.checked = send;
  return c;
}

// `bytes` is the input total.
Call reduce_scatter_call(const BenchOptions& o, Communicator& world, const std::string& algo,
                         size_t bytes, char* send, char* recv) {
  Call c;
  const DataType dt = o.dtype;
  const int n = world.size(), r = world.rank();
  const size_t block = bytes / dtype_size(dt) / static_cast<size_t>(n);
  c.count = c.check_count = block;
  for (size_t i = 0; i < block * static_cast<size_t>(n); ++i) {
    store_from_double(dt, send, i, input_value(r, i));
  }
  const ReduceOp op = o.op;
  if (algo == "mpi") {
    c.fn = [&world, send, recv, block, dt, op] {
      comm::mpi_reference::reduce_scatter(world, send, recv, block, dt, op);
    };
  } else {
    c.fn = [&world, send, recv, block, dt, op] {
      comm::reduce_scatter(world, send, recv, block, dt, op);
    };
  }
  c.expect = [op, n, block, r](size_t i) {
    return expected_allreduce(op, n, static_cast<size_t>(r) * block + i);
  };
  c.checked = recv;
  return c;
}

Call alltoall_call(const BenchOptions& o, Communicator& world, const std::string& algo,
                   size_t bytes, char* send, char* recv) {
  Call c;
  const DataType dt = o.dtype;
  const int n = world.size(), r = world.rank();
  const size_t block = bytes / dtype_size(dt) / static_cast<size_t>(n);
  c.count = block;
  c.check_count = block * static_cast<size_t>(n);
  // Block j of rank r holds (r * 7 + j) % 50 + 1, so rank r receives (j * 7 + r) % 50 + 1 in j.
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < block; ++i) {
      store_from_double(dt, send, static_cast<size_t>(j) * block + i, ((r * 7 + j) % 50) + 1);
    }
  }
  if (algo == "mpi") {
    c.fn = [&world, send, recv, block, dt] {
      comm::mpi_reference::alltoall(world, send, recv, block, dt);
    };
  } else {
    c.fn = [&world, send, recv, block, dt] { comm::alltoall(world, send, recv, block, dt); };
  }
  c.expect = [block, r](size_t i) { return ((static_cast<int>(i / block) * 7 + r) % 50) + 1; };
  c.checked = recv;
  return c;
}

Call call_of(const BenchOptions& o, Communicator& world, const std::string& algo, size_t bytes,
             char* send, char* recv) {
  const std::string& c = o.collective;
  if (c == "allreduce") return allreduce_call(o, world, algo, bytes, send, recv);
  if (c == "allgather") return allgather_call(o, world, algo, bytes, send, recv);
  if (c == "broadcast") return broadcast_call(o, world, algo, bytes, send);
  if (c == "reduce-scatter") return reduce_scatter_call(o, world, algo, bytes, send, recv);
  if (c == "alltoall") return alltoall_call(o, world, algo, bytes, send, recv);
  throw InvalidArgument("unknown collective '" + c +
                        "'; accepted: allreduce allgather broadcast reduce-scatter alltoall");
}

// One row: run, time and check `algo` at `bytes`.
Row measure(const BenchOptions& o, Communicator& world, const std::string& algo, size_t bytes,
            char* send, char* recv) {
  Row row;
  row.bytes = bytes;
  row.algo = algo;
  const Call call = call_of(o, world, algo, bytes, send, recv);
  row.count = call.count;
  if (row.count == 0) return row;
  const int iters = bytes >= (size_t{32} << 20) ? std::max(3, o.iterations / 4) : o.iterations;
  row.time_us = time_calls(world, o.warmup, iters, call.fn);
  int64_t w = count_wrong(o.dtype, call.checked, call.check_count, call.expect);
  comm::AllreduceOptions sum;
  sum.algorithm = Algorithm::kMpi;
  comm::allreduce(world, &w, &w, 1, DataType::kInt64, sum);
  row.wrong = static_cast<long>(w);
  const std::string& c = o.collective;
  const size_t moved =
      c == "allreduce" || c == "broadcast" ? row.count * dtype_size(o.dtype) : bytes;
  row.algbw = static_cast<double>(moved) / row.time_us / 1e3;
  row.busbw = row.algbw * bus_factor(c, world.size());
  return row;
}

void print_header(const BenchOptions& o, int n, const Communicator& world, double copy_gbps) {
  std::printf("# tessera bench %s: %d ranks, %s, dtype %s, op %s, reduction kernels %s\n",
              o.collective.c_str(), n, world.describe().c_str(), dtype_name(o.dtype),
              reduce_op_name(o.op), reduce_isa());
  std::printf("# memcpy while every rank copies: %.2f GB/s per rank\n", copy_gbps);
  std::printf(
      "# time: median of the per-call times of the slowest rank; vs_mpi: MPI's time / "
      "this time (>1 is faster than MPI)\n");
  std::printf("#%11s %12s %6s %6s %13s %11s %9s %9s %7s %7s\n", "size", "count", "type", "redop",
              "algorithm", "time(us)", "algbw", "busbw", "#wrong", "vs_mpi");
  std::printf("#%11s %12s %6s %6s %13s %11s %9s %9s %7s %7s\n", "(B)", "(elements)", "", "", "", "",
              "(GB/s)", "(GB/s)", "", "");
}

int run_calibration(const BenchOptions& o, Communicator& world);

// What one core copies per second while every rank copies at once (the memory system is shared),
// over min(max_bytes, 64 MiB): the yardstick for how close an algorithm comes to what its
// copies per byte allow. Median of 5, slowest rank.
double memcpy_gbps(Communicator& world, size_t max_bytes) {
  const size_t bytes = std::max<size_t>(std::min<size_t>(max_bytes, size_t{64} << 20), 4096);
  Buffer a(bytes), b(bytes);
  std::memset(a.get(), 1, bytes);
  const double us = time_calls(world, 1, 5, [&] { std::memcpy(b.get(), a.get(), bytes); });
  return static_cast<double>(bytes) / us / 1e3;
}

// The engine's fusion-buffer copies as it makes them, every rank at once: 64 MiB of 256 KiB
// tensors copied into one buffer, then scaled (the average's 1/n) back out. Bytes copied per
// second per rank, both directions counted; median of 5, slowest rank.
double fusion_copy_gbps(Communicator& world) {
  const size_t bytes = size_t{64} << 20, piece = size_t{256} << 10;
  Buffer tensors(bytes), fusion(bytes);
  std::memset(tensors.get(), 1, bytes);
  const double us = time_calls(world, 1, 5, [&] {
    for (size_t off = 0; off < bytes; off += piece) {
      std::memcpy(fusion.get() + off, tensors.get() + off, piece);
    }
    for (size_t off = 0; off < bytes; off += piece) {
      scale(DataType::kFloat32, 0.5, fusion.get() + off, tensors.get() + off, piece / 4);
    }
  });
  return 2.0 * static_cast<double>(bytes) / us / 1e3;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.device != "cpu") return run_device_bench(o);
  auto world = Communicator::world();
  if (o.calibrate) return run_calibration(o, *world);
  const int n = world->size();
  const size_t esize = dtype_size(o.dtype);
  const bool per_rank_split =
      o.collective == "allgather" || o.collective == "reduce-scatter" || o.collective == "alltoall";
  const size_t granule = per_rank_split ? esize * static_cast<size_t>(n) : esize;
  const std::vector<size_t> all_sizes = sizes(o, granule);
  const std::vector<std::string> algos = algorithm_list(o);
  check_op_supported(o.dtype, o.op);
  const size_t max_bytes = all_sizes.back();
  Buffer send(max_bytes), recv(max_bytes);
  const double copy_gbps = memcpy_gbps(*world, max_bytes);
  if (world->rank() == 0) print_header(o, n, *world, copy_gbps);
  std::vector<Row> rows;
  std::map<std::string, std::vector<double>> busbw_by_algo;
  long total_wrong = 0;
  for (size_t bytes : all_sizes) {
    std::vector<Row> group;
    double mpi_us = 0;
    for (const std::string& a : algos) {
      Row row = measure(o, *world, a, bytes, send.get(), recv.get());
      if (a == "mpi") mpi_us = row.time_us;
      group.push_back(row);
    }
    for (Row& row : group) {
      row.vs_mpi = row.time_us > 0 ? mpi_us / row.time_us : 0;
      total_wrong += row.wrong;
      busbw_by_algo[row.algo].push_back(row.busbw);
      if (world->rank() == 0) {
        std::string algo = row.algo;
        if (row.algo == "auto" && o.collective == "allreduce") {
          algo = std::string("auto/") + comm::algorithm_name(comm::choose_allreduce(
                                            *world, row.count * esize, Algorithm::kAuto));
        }
        std::printf(" %11zu %12zu %6s %6s %13s %11.2f %9.3f %9.3f %7ld %6.2fx\n", row.bytes,
                    row.count, dtype_name(o.dtype), reduce_op_name(o.op), algo.c_str(), row.time_us,
                    row.algbw, row.busbw, row.wrong, row.vs_mpi);
      }
      rows.push_back(row);
    }
    if (world->rank() == 0) std::fflush(stdout);
  }
  if (world->rank() == 0) {
    for (const auto& kv : busbw_by_algo) {
      double sum = 0;
      for (double b : kv.second) sum += b;
      std::printf("# %-13s avg busbw %.3f GB/s\n", kv.first.c_str(), sum / kv.second.size());
    }
    std::printf("# #wrong total: %ld\n", total_wrong);
    if (!o.json_path.empty()) {
      nlohmann::json j;
      j["collective"] = o.collective;
      j["ranks"] = n;
      j["nodes"] = world->num_nodes();
      j["dtype"] = dtype_name(o.dtype);
      j["op"] = reduce_op_name(o.op);
      j["memcpy_gbps"] = copy_gbps;
      j["rows"] = nlohmann::json::array();
      for (const Row& r : rows) {
        j["rows"].push_back({{"size", r.bytes},
                             {"count", r.count},
                             {"type", dtype_name(o.dtype)},
                             {"redop", reduce_op_name(o.op)},
                             {"algorithm", r.algo},
                             {"time_us", r.time_us},
                             {"algbw", r.algbw},
                             {"busbw", r.busbw},
                             {"wrong", r.wrong},
                             {"vs_mpi", r.vs_mpi}});
      }
      std::ofstream(o.json_path) << j.dump(1) << "\n";
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

namespace {

// Machine parameters for the formulas (other rank counts, the simulator): the reduction
// kernel's speed measured directly, then the links fitted through ring's and hierarchical's
// formulas from the measured `curves`.
void fit_machine(Communicator& world,
                 std::map<Algorithm, std::vector<std::pair<size_t, double>>>& curves,
                 comm::CostTable* t) {
  comm::CostTable& table = *t;
  {
    const size_t count = (size_t{16} << 20) / 4;
    Buffer a(count * 4), b(count * 4);
    const auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i)
      reduce(DataType::kFloat32, ReduceOp::kSum, a.get(), b.get(), a.get(), count);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 5;
    table.reduce_us_per_byte = us / static_cast<double>(count * 4);
  }
  // Per rank while all copy, times the ranks: the node's throughput for the engine's copies.
  table.node_copy_gbps = fusion_copy_gbps(world) * world.local_size();
  const double p = world.size();
  const double g = table.reduce_us_per_byte;
  std::vector<std::array<double, 3>> ring_rows, shm_rows;
  for (const auto& pt : curves[Algorithm::kRing]) {
    const double bytes = static_cast<double>(pt.first);
    ring_rows.push_back(
        {2 * (p - 1), 2 * (p - 1) / p * bytes, pt.second - (p - 1) / p * bytes * g});
  }
  const double l = world.local_size();
  for (const auto& pt : curves[Algorithm::kHierarchical]) {
    const double bytes = static_cast<double>(pt.first);
    if (bytes <= 16384 || world.num_nodes() > 1) continue;
    const double pieces = std::ceil(bytes / static_cast<double>(table.shm_bytes));
    shm_rows.push_back({2 * pieces, 2 * (l - 1) / l * bytes, pt.second - (l - 1) / l * bytes * g});
  }
  if (world.num_nodes() > 1) {
    table.net = comm::fit_link(ring_rows);
  } else {
    table.p2p = comm::fit_link(ring_rows);
  }
  if (shm_rows.size() >= 2 && l > 1) table.shm = comm::fit_link(shm_rows);
}

int run_calibration(const BenchOptions& o, Communicator& world) {
  const int n = world.size();
  TESSERA_CHECK(n >= 2, "--calibrate needs at least 2 ranks (run it under mpirun -np N)");
  BenchOptions c = o;
  c.collective = "allreduce";
  c.dtype = DataType::kFloat32;
  c.op = ReduceOp::kSum;
  c.factor = 4;
  c.min_bytes = std::max<size_t>(o.min_bytes, 8);
  const std::vector<size_t> all_sizes = sizes(c, 4);
  Buffer send(all_sizes.back()), recv(all_sizes.back());
  comm::CostTable table = *world.settings().cost_table;
  table.measured.clear();
  std::map<Algorithm, std::vector<std::pair<size_t, double>>> curves;
  for (size_t bytes : all_sizes) {
    for (Algorithm a : comm::all_algorithms()) {
      const Row row = measure(c, world, comm::algorithm_name(a), bytes, send.get(), recv.get());
      TESSERA_CHECK(row.wrong == 0, "calibration run of ", comm::algorithm_name(a), " at ", bytes,
                    " bytes gave wrong results");
      curves[a].emplace_back(bytes, row.time_us);
    }
  }
  for (const auto& kv : curves) {
    comm::MeasuredCurve m;
    m.algorithm = kv.first;
    m.ranks = n;
    m.nodes = world.num_nodes();
    m.points = kv.second;
    table.measured.push_back(m);
  }
  fit_machine(world, curves, &table);
  if (world.rank() == 0) {
    std::ofstream out(o.table_path + ".tmp");
    out << comm::cost_table_to_json(table) << "\n";
    out.close();
    TESSERA_CHECK(out.good(), "cannot write ", o.table_path, ".tmp");
    TESSERA_CHECK(std::rename((o.table_path + ".tmp").c_str(), o.table_path.c_str()) == 0,
                  "cannot rename the cost table into ", o.table_path);
    std::printf(
        "# calibrated %d ranks on %d node(s): p2p alpha %.2f us beta %.3f GB/s; shm alpha "
        "%.2f us beta %.3f GB/s; reduce %.2f GB/s\n",
        n, world.num_nodes(), table.p2p.alpha_us, 1e-3 / table.p2p.beta_us_per_byte,
        table.shm.alpha_us, 1e-3 / table.shm.beta_us_per_byte, 1e-3 / table.reduce_us_per_byte);
    std::printf("# wrote %s; use it with TESSERA_COST_TABLE=%s\n", o.table_path.c_str(),
                o.table_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace tessera
