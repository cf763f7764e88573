#include "runtime/elastic.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"

namespace tessera {
namespace runtime {
namespace {

std::string g_dir;
int g_generation = 0;
int g_snapshot_every = 1;
std::atomic<int64_t> g_step{-1};

}  // namespace

std::string encode_failure_record(const FailureRecord& r) {
  nlohmann::json lost = nlohmann::json::array();
  for (const auto& [rank, host] : r.lost) lost.push_back({{"rank", rank}, {"host", host}});
  const nlohmann::json j = {
      {"generation", r.generation}, {"rank", r.rank}, {"host", r.host}, {"step", r.step},
      {"reason", r.reason},         {"lost", lost}};
  return j.dump() + "\n";
}

FailureRecord decode_failure_record(const std::string& text, const std::string& source) {
  FailureRecord r;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    r.generation = j.at("generation").get<int>();
    r.rank = j.at("rank").get<int>();
    r.host = j.at("host").get<std::string>();
    r.step = j.at("step").get<int64_t>();
    r.reason = j.at("reason").get<std::string>();
    for (const auto& l : j.at("lost")) {
      r.lost.emplace_back(l.at("rank").get<int>(), l.at("host").get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(source + " is not a failure record (" + e.what() +
                          "); a record is JSON with generation, rank, host, step, reason and "
                          "lost [{rank, host}]");
  }
  return r;
}

std::string failure_record_path(const std::string& dir, int generation, int rank) {
  return dir + "/failures/g" + std::to_string(generation) + ".r" + std::to_string(rank) + ".json";
}

bool hosts_update_pending(const std::string& dir, int generation) {
  std::ifstream in(dir + "/hosts-updated");
  long long notice = -1;
  return in >> notice && notice == generation;
}

std::string restart_marker_path(const std::string& dir, int generation) {
  return dir + "/g" + std::to_string(generation) + ".restart";
}

void configure_elastic(const SettingValues& settings) {
  g_dir = kElasticDir.get(settings);
  g_generation = static_cast<int>(kElasticGeneration.get(settings));
  g_snapshot_every = static_cast<int>(kElasticSnapshotEvery.get(settings));
}

bool elastic_enabled() { return !g_dir.empty(); }
const std::string& elastic_dir() { return g_dir; }
int elastic_generation() { return g_generation; }
int elastic_snapshot_every() { return g_snapshot_every; }
void set_progress_step(int64_t step) { g_step = step; }
int64_t progress_step() { return g_step.load(); }

void record_failure(int rank, const std::string& host, const std::string& reason,
                    const std::vector<std::pair<int, std::string>>& lost) {
  if (g_dir.empty()) return;
  const std::string path = failure_record_path(g_dir, g_generation, rank);
  if (access(path.c_str(), F_OK) == 0) return;  // the first cause stands
  try {
    FailureRecord r{g_generation, rank, host, g_step.load(), reason, lost};
    ::mkdir((g_dir + "/failures").c_str(), 0755);  // the supervisor made it; a race is harmless
    const std::string text = encode_failure_record(r);
    write_file_atomically(path, text.data(), text.size());
  } catch (...) {
    // The process is ending; the supervisor falls back to mpirun's own report.
  }
}

void record_own_failure(int rank, const std::string& error) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);  // as the heartbeat's peers name hosts
  record_failure(rank, host, "rank " + std::to_string(rank) + " failed: " + error, {{rank, host}});
}

void mark_restart_for_hosts() {
  TESSERA_CHECK(!g_dir.empty(),
                "no elastic folder: the job was not started by `tessera run "
                "--min-np/--max-np/--host-discovery-script`");
  const std::string text = std::to_string(g_generation) + "\n";
  write_file_atomically(restart_marker_path(g_dir, g_generation), text.data(), text.size());
}

}  // namespace runtime
}  // namespace tessera
