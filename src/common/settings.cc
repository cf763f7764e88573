#include "common/settings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "common/agreement.h"
#include "common/error.h"
#include "common/strings.h"

extern char** environ;  // NOLINT: POSIX; read once by environment_settings()

namespace tessera {
namespace {

// The value given for `name`, or nullptr when no source gave one.
const std::string* find(const SettingValues& values, const char* name) {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

[[noreturn]] void bad_value(const char* name, const std::string& value, const std::string& why,
                            const std::string& accepted) {
  throw InvalidArgument(
      detail::concat(name, "='", value, "' is not accepted: ", why, "; accepted: ", accepted));
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

}  // namespace

double NumberSetting::get(const SettingValues& values) const {
  const std::string* v = find(values, name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v->c_str(), &end);
  const bool in_range = positive ? t > 0 : t >= 0;
  if (v->empty() || *end != '\0' || errno != 0 || !in_range || !(t < 1e9)) {
    bad_value(name, *v, positive ? "not a number > 0" : "not a number >= 0", info().accepted);
  }
  return t;
}

std::string NumberSetting::format(double v) const {
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);  // shortest exact text
  return std::string(buf, r.ptr);
}

SettingInfo NumberSetting::info() const {
  std::string accepted = std::string(unit) + ", a number " + (positive ? "> 0" : ">= 0");
  if (*zero_means != '\0') accepted += std::string(" (0: ") + zero_means + ")";
  return {name, number_text(fallback), accepted, meaning,
          [this](const SettingValues& v) { get(v); }};
}

long IntSetting::get(const SettingValues& values) const {
  const std::string* v = find(values, name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno != 0) {
    bad_value(name, *v, "not an integer", info().accepted);
  }
  if (x < lo || x > hi) bad_value(name, *v, "out of range", info().accepted);
  return x;
}

SettingInfo IntSetting::info() const {
  return {name, std::to_string(fallback), detail::concat("an integer from ", lo, " to ", hi),
          meaning, [this](const SettingValues& v) { get(v); }};
}

size_t BytesSetting::get(const SettingValues& values) const {
  const std::string* v = find(values, name);
  if (v == nullptr) return fallback;
  size_t b = 0;
  try {
    b = parse_bytes(*v);
  } catch (const InvalidArgument& e) {
    bad_value(name, *v, e.what(), info().accepted);
  }
  if (b < lo || b > hi) bad_value(name, *v, "out of range", info().accepted);
  return b;
}

std::string BytesSetting::format(size_t v) const { return format_bytes(v); }

SettingInfo BytesSetting::info() const {
  std::string accepted = "a byte size (K/KiB, M/MiB, G/GiB suffixes) from " + format_bytes(lo) +
                         " to " + format_bytes(hi);
  return {name, format_bytes(fallback), accepted, meaning,
          [this](const SettingValues& v) { get(v); }};
}

std::string ChoiceSetting::get(const SettingValues& values) const {
  const std::string* v = find(values, name);
  if (v == nullptr) return fallback;
  std::stringstream list(choices);
  for (std::string word; std::getline(list, word, ',');) {
    if (word == *v) return word;
  }
  bad_value(name, *v, "not one of the choices", info().accepted);
}

SettingInfo ChoiceSetting::info() const {
  std::string accepted = choices;
  for (size_t at = accepted.find(','); at != std::string::npos; at = accepted.find(',', at + 2)) {
    accepted.replace(at, 1, ", ");
  }
  return {name, fallback, accepted, meaning, [this](const SettingValues& v) { get(v); }};
}

std::string TextSetting::get(const SettingValues& values) const {
  const std::string* v = find(values, name);
  if (v == nullptr) return fallback;
  if (check != nullptr) {
    try {
      check(*v);
    } catch (const InvalidArgument& e) {
      bad_value(name, *v, e.what(), accepted);
    }
  }
  return *v;
}

SettingInfo TextSetting::info() const {
  const std::string shown =
      *fallback != '\0' ? std::string(fallback) : std::string("(empty: ") + empty_means + ")";
  return {name, shown, accepted, meaning, [this](const SettingValues& v) { get(v); }};
}

size_t parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 19) {
    throw InvalidArgument("byte size '" + text +
                          "' is not a number; accepted: digits with an optional K, KiB, M, MiB, "
                          "G or GiB suffix");
  }
  const unsigned long long value = std::strtoull(text.substr(0, i).c_str(), nullptr, 10);
  const std::string suffix = text.substr(i);
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "k") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else {
    throw InvalidArgument("byte size '" + text + "' has unknown suffix '" + suffix +
                          "'; accepted: K, KiB, M, MiB, G, GiB or none");
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) {
    throw InvalidArgument("byte size '" + text + "' overflows");
  }
  return static_cast<size_t>(value) << shift;
}

std::string format_bytes(size_t bytes) {
  static const char* const kSuffix[] = {"", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (bytes != 0 && unit + 1 < 5 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kSuffix[unit];
}

SettingValues merge_settings(const SettingSources& sources) {
  // Lowest precedence first, so that each later source overwrites.
  SettingValues merged = sources.config_file;
  for (const auto& kv : sources.environment) merged[kv.first] = kv.second;
  for (const auto& kv : sources.explicit_values) merged[kv.first] = kv.second;
  return merged;
}

ResolvedSettings resolve_settings(const SettingSources& sources,
                                  const std::vector<SettingInfo>& known) {
  ResolvedSettings r;
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  const std::vector<std::string> bad_explicit = unknown_settings(sources.explicit_values, known);
  const std::vector<std::string> bad_config = unknown_settings(sources.config_file, known);
  if (!bad_explicit.empty()) r.error = "unknown setting " + join(bad_explicit);
  if (!bad_config.empty()) {
    r.error +=
        (r.error.empty() ? "" : "; ") + std::string("unknown config file key ") + join(bad_config);
  }
  if (!r.error.empty()) r.error += "; docs/knobs.md lists every setting";
  SettingSources kept = sources;
  for (const std::string& w : unknown_settings(sources.environment, known)) {
    r.warnings.push_back("ignoring environment variable " + w + ": not a tessera setting");
    kept.environment.erase(w.substr(0, w.find(' ')));
  }
  r.values = merge_settings(kept);
  for (const SettingInfo& info : known) {
    try {
      if (info.check) info.check(r.values);
    } catch (const InvalidArgument& e) {
      r.error += (r.error.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  return r;
}

std::string nearest_name(const std::string& name, const std::vector<SettingInfo>& known) {
  // A name cut short (TESSERA_FUSION) is nearest to the shortest name that starts with it, which
  // an edit distance would rank below an unrelated name of about its length.
  std::string shortest_extension;
  for (const SettingInfo& info : known) {
    const bool extends = info.name.size() > name.size() && info.name.rfind(name, 0) == 0;
    if (extends && (shortest_extension.empty() || info.name.size() < shortest_extension.size())) {
      shortest_extension = info.name;
    }
  }
  if (!shortest_extension.empty()) return shortest_extension;
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const SettingInfo& info : known) {
    const size_t d = edit_distance(name, info.name);
    if (d < best_distance) {
      best_distance = d;
      best = info.name;
    }
  }
  return best;
}

std::vector<std::string> unknown_settings(const SettingValues& values,
                                          const std::vector<SettingInfo>& known) {
  std::vector<std::string> out;
  for (const auto& kv : values) {
    const bool declared = std::any_of(known.begin(), known.end(),
                                      [&](const SettingInfo& i) { return i.name == kv.first; });
    if (!declared) {
      out.push_back(kv.first + " (did you mean " + nearest_name(kv.first, known) + "?)");
    }
  }
  return out;
}

std::string settings_disagreement(const std::vector<SettingValues>& by_rank) {
  SettingValues every_name;
  for (const SettingValues& v : by_rank) every_name.insert(v.begin(), v.end());
  std::string out;
  for (const auto& kv : every_name) {
    // Value text ("unset" when absent) -> the ranks holding it, in rank order.
    std::map<std::string, std::vector<int>> holders;
    for (size_t r = 0; r < by_rank.size(); ++r) {
      const std::string* v = find(by_rank[r], kv.first.c_str());
      holders[v ? "'" + *v + "'" : std::string("unset")].push_back(static_cast<int>(r));
    }
    if (holders.size() == 1) continue;
    out += (out.empty() ? "" : ", ") + kv.first + " differs between ranks (";
    const char* sep = "";
    for (const auto& h : holders) {
      out +=
          sep + h.first + (h.second.size() == 1 ? " on rank " : " on ranks ") + rank_list(h.second);
      sep = "; ";
    }
    out += ")";
  }
  if (!out.empty()) {
    out +=
        ": every rank must hold the same settings (a config file or an environment variable "
        "present on some hosts only? `mpirun -x NAME` passes a variable to every rank)";
  }
  return out;
}

SettingValues environment_settings() {
  // Called once from init, before any thread of ours exists: reading environ is safe here.
  SettingValues out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || std::strncmp(*e, "TESSERA_", 8) != 0) continue;
    out[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return out;
}

std::string settings_markdown(const std::vector<SettingInfo>& infos) {
  std::string out = "| setting | default | accepted | meaning |\n|---|---|---|---|\n";
  for (const SettingInfo& i : infos) {
    // "(empty: auto)" is prose, a value is code.
    const std::string shown =
        i.default_text.rfind("(", 0) == 0 ? i.default_text : "`" + i.default_text + "`";
    out += "| `" + i.name + "` | " + shown + " | " + i.accepted + " | " + i.meaning + " |\n";
  }
  return out;
}

}  // namespace tessera
