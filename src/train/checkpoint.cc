#include "train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/strings.h"
#include "torch/optimizer_state.h"

namespace tessera {
namespace train {
namespace {

constexpr const char* kFormat = "tessera-checkpoint-1";
constexpr size_t kEnvelope = 32;

void put_u64(std::string& out, uint64_t v) {
  for (int k = 0; k < 8; ++k) out += static_cast<char>((v >> (8 * k)) & 0xff);
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[k])) << (8 * k);
  return v;
}

}  // namespace

std::string checkpoint_archive(const std::string& bytes, const std::string& source) {
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) {
    throw InvalidArgument("checkpoint '" + source +
                          "' was written by an older tessera (a bare archive without the "
                          "checksummed envelope of " +
                          kCheckpointMagic +
                          "); it cannot be checked for damage, so it is not loaded");
  }
  TESSERA_CHECK(
      bytes.size() >= kEnvelope && bytes.compare(0, 16, std::string(kCheckpointMagic, 16)) == 0,
      "checkpoint '", source, "' is not a tessera checkpoint (", kCheckpointMagic,
      ") or is truncated before its header");
  const uint64_t length = get_u64(bytes.data() + 16), digest = get_u64(bytes.data() + 24);
  TESSERA_CHECK(length == bytes.size() - kEnvelope, "checkpoint '", source,
                "' is truncated or damaged: its header says ", length,
                " bytes of archive, the file holds ", bytes.size() - kEnvelope,
                "; it was not loaded");
  TESSERA_CHECK(fnv1a64(bytes.data() + kEnvelope, length) == digest, "checkpoint '", source,
                "' is truncated or damaged: its checksum does not match; it was not loaded");
  return bytes.substr(kEnvelope);
}

std::string encode_checkpoint(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                              const CheckpointMeta& meta) {
  torch::serialize::OutputArchive archive, model, optim;
  module.save(model);
  detail::save_optimizer(optimizer, optim);
  archive.write("format", c10::IValue(std::string(kFormat)));
  archive.write("model_name", c10::IValue(meta.model));
  archive.write("num_classes", c10::IValue(meta.num_classes));
  archive.write("image_size", c10::IValue(meta.image_size));
  archive.write("step", c10::IValue(meta.step));
  archive.write("epoch", c10::IValue(meta.epoch));
  archive.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
  archive.write("model", model);
  archive.write("optimizer", optim);
  std::ostringstream os;
  archive.save_to(os);
  const std::string zip = os.str();
  std::string out(kCheckpointMagic, 16);
  out.reserve(kEnvelope + zip.size());  // one copy of the archive, not two
  put_u64(out, zip.size());
  put_u64(out, fnv1a64(zip));
  out += zip;
  return out;
}

void write_checkpoint(const std::string& path, torch::nn::Module& module,
                      torch::optim::Optimizer& optimizer, const CheckpointMeta& meta) {
  const std::string bytes = encode_checkpoint(module, optimizer, meta);
  write_file_atomically(path, bytes.data(), bytes.size());
}

CheckpointMeta restore_checkpoint(const std::string& bytes, const std::string& source,
                                  const CheckpointMeta& expect, torch::nn::Module& module,
                                  torch::optim::Optimizer& optimizer) {
  torch::serialize::InputArchive archive;
  CheckpointMeta meta;
  c10::IValue v;
  torch::Tensor rng;
  torch::serialize::InputArchive model, optim;
  std::istringstream is(checkpoint_archive(bytes, source));
  try {
    // Every tensor onto the CPU, whatever device wrote it: a GPU run's checkpoint resumes on a
    // machine without one, and the trainer moves the model to its device after restoring.
    archive.load_from(is, torch::Device(torch::kCPU));
    TESSERA_CHECK(archive.try_read("format", v) && v.isString() && v.toStringRef() == kFormat,
                  "checkpoint '", source, "' is not a tessera checkpoint (", kFormat, ")");
    archive.read("model_name", v);
    meta.model = v.toStringRef();
    archive.read("num_classes", v);
    meta.num_classes = v.toInt();
    archive.read("image_size", v);
    meta.image_size = v.toInt();
    archive.read("step", v);
    meta.step = v.toInt();
    archive.read("epoch", v);
    meta.epoch = v.toInt();
    archive.read("rng_cpu", rng);
    archive.read("model", model);
    archive.read("optimizer", optim);
  } catch (const c10::Error& e) {
    throw InvalidArgument("checkpoint '" + source + "' is truncated or damaged (" +
                          e.what_without_backtrace() + "); it was not loaded");
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& e) {
    // libtorch's reader also throws plain std::runtime_error (its TorchScript type parser, on a
    // damaged type name: found by tests/fuzz/fuzz_checkpoint.cc).
    throw InvalidArgument("checkpoint '" + source + "' is truncated or damaged (" + e.what() +
                          "); it was not loaded");
  }
  TESSERA_CHECK(meta.model == expect.model && meta.num_classes == expect.num_classes,
                "checkpoint '", source, "' holds ", meta.model, " with ", meta.num_classes,
                " classes, but this run trains ", expect.model, " with ", expect.num_classes);
  try {
    module.load(model);
    detail::load_optimizer(optimizer, optim);
  } catch (const c10::Error& e) {
    throw InvalidArgument("checkpoint '" + source +
                          "' does not fit the model: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw InvalidArgument("checkpoint '" + source + "' does not fit the model: " + e.what());
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(rng);
  } catch (const c10::Error& e) {
    throw InvalidArgument("checkpoint '" + source + "' holds a damaged random generator state: " +
                          e.what_without_backtrace());
  }
  return meta;
}

}  // namespace train
}  // namespace tessera
