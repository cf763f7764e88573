#include "apps/tessera/bench_cli.h"

#include "common/settings.h"

namespace tessera {
namespace app {

void add_collective_bench_flags(CLI::App& cmd, BenchFlags& f) {
  bench::BenchOptions& o = f.options;
  f.min_bytes = format_bytes(o.min_bytes);
  f.max_bytes = format_bytes(o.max_bytes);
  cmd.add_option("-b,--minbytes", f.min_bytes, "smallest size (bytes; K/M/G suffixes)");
  cmd.add_option("-e,--maxbytes", f.max_bytes, "largest size (bytes; K/M/G suffixes)");
  cmd.add_option("-f,--stepfactor", o.factor, "size multiplier between rows");
  cmd.add_option("-n,--iters", o.iterations, "timed calls per row")->check(CLI::Range(1, 1000000));
  cmd.add_option("-w,--warmup_iters,--warmup", o.warmup, "untimed calls per row")
      ->check(CLI::Range(0, 1000000));
  cmd.add_option("--algo", f.algorithms,
                 "allreduce algorithms: auto ring rhd dbtree multicolor hierarchical mpi, "
                 "or all, comma-separated (mpi is always measured as the reference)")
      ->delimiter(',');
  cmd.add_option("-d,--datatype", f.dtype, "f32 f64 f16 bf16 i32 i64 u8");
  cmd.add_option("-o,--op", f.op, "sum avg min max prod band bor");
  cmd.add_option("--json", o.json_path, "also write the rows as JSON to this file");
  cmd.add_option("--device", o.device,
                 "collectives: where the buffers live: cpu, cuda (this rank's GPU), fake (the "
                 "test device); bench train: where the model trains: cpu, cuda, cuda:I,J,... or "
                 "auto");
  cmd.add_option("--backend", o.backends,
                 "--device: backends to measure: auto nccl ipc staged hierarchical, or all "
                 "(every one that can run here)")
      ->delimiter(',');
  cmd.add_flag("--calibrate", o.calibrate,
               "allreduce: measure every algorithm and write the cost table for auto");
  cmd.add_option("--table", o.table_path, "where --calibrate writes the cost table");
}

void finish_bench_options(BenchFlags& f) {
  bench::BenchOptions& o = f.options;
  o.min_bytes = parse_bytes(f.min_bytes);
  o.max_bytes = parse_bytes(f.max_bytes);
  o.dtype = parse_dtype(f.dtype);
  o.op = parse_reduce_op(f.op);
  if (!f.algorithms.empty()) o.algorithms = f.algorithms;
}

}  // namespace app
}  // namespace tessera
