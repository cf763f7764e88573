// The settings mechanism. Each layer declares its own TESSERA_* settings next to the code that
// uses them, as constants of the declaration types below (name, default, accepted range and a
// one-line meaning, in one place, in the spirit of NCCL's NCCL_PARAM), and builds its settings
// struct from a SettingValues with `get`. This file holds only the mechanism: parsing, what
// docs/knobs.md lists, the precedence of the sources, the nearest known name for a typo, and the
// check that every rank holds the same values. Nothing here knows any layer's settings, and
// environment_settings() is the one place in tessera that reads the environment.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera {

// Settings by name, as the environment would give them: {"TESSERA_FUSION_THRESHOLD", "64MiB"}.
using SettingValues = std::map<std::string, std::string>;

// One row of docs/knobs.md, and the check of a value (the declaration's get, which throws
// InvalidArgument for a bad one).
struct SettingInfo {
  std::string name;
  std::string default_text;
  std::string accepted;
  std::string meaning;
  std::function<void(const SettingValues&)> check;
};

// A number (seconds, milliseconds): lo <= v < hi, or lo < v < hi when `positive`.
struct NumberSetting {
  const char* name;
  double fallback;
  const char* unit;        // "seconds", "milliseconds"
  bool positive;           // true: > 0; false: >= 0
  const char* zero_means;  // what 0 does ("" when 0 is not special)
  const char* meaning;
  double get(const SettingValues& values) const;
  SettingInfo info() const;
  std::string format(double v) const;
};

// An integer from lo to hi.
struct IntSetting {
  const char* name;
  long fallback;
  long lo, hi;
  const char* meaning;
  long get(const SettingValues& values) const;
  SettingInfo info() const;
  std::string format(long v) const { return std::to_string(v); }
};

// A byte size ("4096", "64K", "64KiB", "1M", "2GiB") from lo to hi.
struct BytesSetting {
  const char* name;
  size_t fallback;
  size_t lo, hi;
  const char* meaning;
  size_t get(const SettingValues& values) const;
  SettingInfo info() const;
  std::string format(size_t v) const;
};

// One word of a comma-separated list: "keep,system".
struct ChoiceSetting {
  const char* name;
  const char* fallback;
  const char* choices;
  const char* meaning;
  std::string get(const SettingValues& values) const;
  SettingInfo info() const;
  std::string format(const std::string& v) const { return v; }
};

// Free text (a path, a grammar of its own). `check`, when set, throws InvalidArgument for a
// malformed value; its message is quoted with the setting's name.
struct TextSetting {
  const char* name;
  const char* fallback;
  const char* empty_means;  // shown as the default when fallback is empty: "auto", "none"
  const char* accepted;
  const char* meaning;
  void (*check)(const std::string& value) = nullptr;
  std::string get(const SettingValues& values) const;
  SettingInfo info() const;
  std::string format(const std::string& v) const { return v; }
};

// Parses a byte size: "4096", "64K", "64KiB", "1M", "1MiB", "2G", "2GiB" (powers of 1024).
// Throws InvalidArgument quoting the text.
size_t parse_bytes(const std::string& text);
// The shortest exact text of a byte size: 262144 -> "256KiB", 1000 -> "1000".
std::string format_bytes(size_t bytes);

// Where a setting's value came from, highest precedence first.
struct SettingSources {
  SettingValues explicit_values;  // InitOptions::settings (Python's init(...), a test)
  SettingValues environment;      // environment_settings()
  SettingValues config_file;      // `tessera train --config F`
};
// The merged values: an explicit value wins over the environment's, which wins over the config
// file's; settings none of them gives keep their declared default (they are absent here).
SettingValues merge_settings(const SettingSources& sources);

// One rank's settings before the ranks agree: the merged values, and what was wrong with its
// sources (reported by every rank once they agree, so that no rank throws alone and leaves the
// others waiting).
struct ResolvedSettings {
  SettingValues values;
  std::string error;                  // "" when the sources were fine
  std::vector<std::string> warnings;  // unknown environment names, dropped
};
// Merges `sources` (merge_settings) and checks every value `known` declares (a bad one is the
// error, quoting it and what is accepted). A name `known` does not declare is an error when given
// explicitly or by a config file (both are written for tessera), and a warning when it comes from
// the environment, which launch scripts and other tools share (our own scripts export
// TESSERA_BIN, TESSERA_TEST_*): it is dropped there, never silently used.
ResolvedSettings resolve_settings(const SettingSources& sources,
                                  const std::vector<SettingInfo>& known);

// The known name closest to `name`, for "did you mean" messages: the shortest one that extends it
// (a name cut short), else the one at the least edit distance.
std::string nearest_name(const std::string& name, const std::vector<SettingInfo>& known);
// Names of `values` that `known` does not declare, each with the nearest known name:
// "TESSERA_FUSION_TRESHOLD (did you mean TESSERA_FUSION_THRESHOLD?)". Empty when all are known.
std::vector<std::string> unknown_settings(const SettingValues& values,
                                          const std::vector<SettingInfo>& known);

// Every rank's merged values, by rank. "" when every rank holds the same; otherwise one message
// naming each setting that differs and which ranks hold which value, the same text on every
// rank that runs this on the same input.
std::string settings_disagreement(const std::vector<SettingValues>& by_rank);

// Every TESSERA_* variable of this process's environment. The one place that reads it; called
// once, by init, before any thread of ours exists.
SettingValues environment_settings();

// The docs/knobs.md table of `infos` (a header row and one row per setting).
std::string settings_markdown(const std::vector<SettingInfo>& infos);

}  // namespace tessera
