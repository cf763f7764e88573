#include "apps/tessera/data_cli.h"

#include <chrono>
#include <cstdio>

namespace tessera {
namespace app {

CLI::App* add_make_dataset_command(CLI::App& app, data::MakeDatasetOptions& o) {
  CLI::App* c =
      app.add_subcommand("make-dataset",
                         "write a synthetic data set as image files (shapes: VOC layout; classes: "
                         "class folders and CSV manifests)");
  c->add_option("kind", o.kind, "shapes, classes or slides")
      ->required()
      ->check(CLI::IsMember({"shapes", "classes", "slides"}));
  c->add_option("--out", o.out, "the folder to write")->required();
  c->add_option("--size", o.size, "samples in all (train and val)")->capture_default_str();
  c->add_option("--image-size", o.image_size, "image side in pixels")->capture_default_str();
  c->add_option("--val-fraction", o.val_fraction, "share of the samples in the val split")
      ->capture_default_str();
  c->add_option("--seed", o.seed, "sample i is a function of (seed, i)")->capture_default_str();
  return c;
}

int run_make_dataset(const data::MakeDatasetOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const data::MakeDatasetResult r = data::make_dataset(o);
  std::printf(
      "wrote %s data set '%s': %lld train + %lld val samples of %lldx%lld, %.1f MiB in "
      "%.1f s\n",
      o.kind.c_str(), o.out.c_str(), static_cast<long long>(r.train), static_cast<long long>(r.val),
      static_cast<long long>(o.image_size), static_cast<long long>(o.image_size),
      static_cast<double>(r.bytes) / (1024.0 * 1024.0),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

void add_data_bench_options(CLI::App& bench, train::DataBenchOptions& o) {
  bench.add_option("--data", o.data, "bench data: the data set's folder");
  bench.add_option("--format", o.format, "bench data: folder, csv, voc, cityscapes")
      ->capture_default_str();
  bench.add_option("--workers", o.workers, "bench data: worker counts to measure")->delimiter(',');
  bench
      .add_option("--batches", o.batches,
                  "bench data: batches per measurement (0: one epoch of the shard)")
      ->capture_default_str();
  bench.add_option("--repeats", o.repeats, "bench data: measurements per worker count")
      ->capture_default_str();
  bench.add_flag("--keep-decoded", o.keep_decoded, "bench data: keep decoded pixels in memory");
  bench
      .add_option("--reference-model", o.reference_model,
                  "bench data: the model whose training step the pipeline must outrun (none: "
                  "no reference)")
      ->capture_default_str();
}

}  // namespace app
}  // namespace tessera
