#include "tune/config_file.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/knobs.h"

namespace tessera {
namespace tune {

void write_config(const std::string& path, const KnobValues& knobs, const std::string& info_json) {
  nlohmann::json j =
      info_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(info_json);
  nlohmann::json k = nlohmann::json::object();
  for (const auto& kv : knobs) k[kv.first] = kv.second;
  j["knobs"] = k;
  const std::string text = j.dump(1) + "\n";
  write_file_atomically(path, text.data(), text.size());
}

KnobValues read_config(const std::string& path) {
  const std::vector<char> bytes = read_file(path);
  return parse_config(std::string(bytes.begin(), bytes.end()), path);
}

KnobValues parse_config(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("--config " + path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("knobs") || !j.at("knobs").is_object()) {
    throw InvalidArgument("--config " + path +
                          ": expected a JSON object with a \"knobs\" object of TESSERA_* names "
                          "and values (as `tessera tune` writes)");
  }
  KnobValues out;
  for (auto it = j.at("knobs").begin(); it != j.at("knobs").end(); ++it) {
    bool known = false;
    for (const KnobInfo& info : knob_table()) known = known || it.key() == info.name;
    if (!known) {
      throw InvalidArgument("--config " + path + ": knobs." + it.key() +
                            " is not a tessera knob; docs/knobs.md lists them");
    }
    std::string value;
    if (it.value().is_string()) {
      value = it.value().get<std::string>();
    } else if (it.value().is_number()) {
      value = it.value().dump();
    } else {
      throw InvalidArgument("--config " + path + ": knobs." + it.key() +
                            " must be a string or a number, got " + it.value().dump());
    }
    out.emplace_back(it.key(), value);
  }
  return out;
}

KnobValues apply_config_to_environment(const std::string& path) {
  KnobValues set;
  for (const auto& kv : read_config(path)) {
    // Before tessera::init and before any thread of ours: setenv is safe here.
    if (std::getenv(kv.first.c_str()) != nullptr) continue;  // NOLINT: explicit wins
    ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
    set.push_back(kv);
  }
  return set;
}

}  // namespace tune
}  // namespace tessera
