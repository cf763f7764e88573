// The tuned configuration on disk: a JSON object whose "knobs" member maps TESSERA_* setting
// names to the values (as the environment would give them) the autotuner found best, with its
// score beside for the record. `tessera train --config FILE` hands them to tessera::init as the
// config-file source (InitOptions::config_file): below the environment and explicit values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/settings.h"

namespace tessera {
namespace tune {

using KnobValues = std::vector<std::pair<std::string, std::string>>;

// Written atomically. `info` is merged in beside "knobs" (scores, steps, the start's score).
void write_config(const std::string& path, const KnobValues& knobs, const std::string& info_json);
// The "knobs" of a config file. Throws InvalidArgument naming the path and the field when the
// file is unreadable, not JSON, lacks "knobs", or gives a value that is not a string or number.
// Names and values are checked where every setting is known (tessera::init: an unknown name is
// an error naming the nearest known one).
SettingValues read_config(const std::string& path);
// The same from the file's text (`path` names it in errors). Pure: the fuzz target's entry.
SettingValues parse_config(const std::string& text, const std::string& path);

}  // namespace tune
}  // namespace tessera
