// The tuned configuration on disk: a JSON object whose "knobs" member maps TESSERA_* knob names
// to the values (as the environment would give them) the autotuner found best, with its score
// beside for the record. `tessera train --config FILE` applies the knobs for every one the
// environment does not set itself.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace tune {

using KnobValues = std::vector<std::pair<std::string, std::string>>;

// Written atomically. `info` is merged in beside "knobs" (scores, steps, the start's score).
void write_config(const std::string& path, const KnobValues& knobs, const std::string& info_json);
// The "knobs" of a config file. Throws InvalidArgument naming the path and the field when the
// file is unreadable, not JSON, lacks "knobs", names a knob the registry does not have, or gives
// a value that is not a string or number. The values themselves are checked by the knob parser.
KnobValues read_config(const std::string& path);
// The same from the file's text (`path` names it in errors). Pure: the fuzz target's entry.
KnobValues parse_config(const std::string& text, const std::string& path);
// Sets each knob of `path` in this process's environment unless it is already set there, before
// tessera initialises (rank 0's environment is then every rank's). Returns what it set.
KnobValues apply_config_to_environment(const std::string& path);

}  // namespace tune
}  // namespace tessera
