#include "engine/timeline.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tessera {
namespace engine {
namespace {
constexpr char kClose[] = "\n]\n";
constexpr long kCloseBytes = 3;
}  // namespace

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) return;
  file_ = std::fopen(path.c_str(), "w");
  TESSERA_CHECK(file_ != nullptr, "cannot write the timeline to '", path,
                "': check that the directory exists and is writable");
  active_ = true;
  first_ = true;
  origin_ = Clock::now();
  rows_.clear();
  std::fputs("[", file_);
  std::fputs(kClose, file_);
  std::fflush(file_);
  std::fseek(file_, -kCloseBytes, SEEK_CUR);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  write("");
  std::fclose(file_);
  file_ = nullptr;
  active_ = false;
}

int Timeline::row_of(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  nlohmann::json meta = {
      {"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", row}, {"args", {{"name", tensor}}}};
  buffer_ += (first_ ? "\n" : ",\n") + meta.dump();
  first_ = false;
  return row;
}

void Timeline::event(const std::string& tensor, const std::string& name, Clock::time_point begin,
                     Clock::time_point end, const nlohmann::json& args) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ == nullptr) return;
  const int row = row_of(tensor);
  const double ts = std::chrono::duration<double, std::micro>(begin - origin_).count();
  const double dur = std::chrono::duration<double, std::micro>(end - begin).count();
  nlohmann::json e = {{"ph", "X"}, {"name", name}, {"pid", 0},    {"tid", row},
                      {"ts", ts},  {"dur", dur},   {"args", args}};
  buffer_ += (first_ ? "\n" : ",\n") + e.dump();
  first_ = false;
  if (buffer_.size() > (64u << 10)) write("");
}

void Timeline::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_ != nullptr) write("");
}

void Timeline::write(const std::string& text) {
  buffer_ += text;
  if (buffer_.empty()) return;
  // Overwrite the previous closing bracket, then close again: valid JSON after every flush.
  std::fputs(buffer_.c_str(), file_);
  std::fputs(kClose, file_);
  std::fflush(file_);
  std::fseek(file_, -kCloseBytes, SEEK_CUR);
  buffer_.clear();
}

}  // namespace engine
}  // namespace tessera
