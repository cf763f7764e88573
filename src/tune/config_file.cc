#include "tune/config_file.h"

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"

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

SettingValues read_config(const std::string& path) {
  const std::vector<char> bytes = read_file(path);
  return parse_config(std::string(bytes.begin(), bytes.end()), path);
}

SettingValues parse_config(const std::string& text, const std::string& path) {
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
  SettingValues out;
  for (auto it = j.at("knobs").begin(); it != j.at("knobs").end(); ++it) {
    std::string value;
    if (it.value().is_string()) {
      value = it.value().get<std::string>();
    } else if (it.value().is_number()) {
      value = it.value().dump();
    } else {
      throw InvalidArgument("--config " + path + ": knobs." + it.key() +
                            " must be a string or a number, got " + it.value().dump());
    }
    out[it.key()] = value;
  }
  return out;
}

}  // namespace tune
}  // namespace tessera
