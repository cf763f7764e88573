// The knob registry: defaults, parsing, errors that quote the value, and docs/knobs.md listing
// every knob.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/knobs.h"

namespace tessera {
namespace {

Knobs parse(const std::map<std::string, std::string>& env) {
  return parse_knobs([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Knobs, DefaultsWhenUnset) {
  const Knobs k = parse({});
  EXPECT_EQ(k.ranks_per_node, 0);
  EXPECT_EQ(k.colors, 4);
  EXPECT_EQ(k.segment_bytes, 256u << 10);
  EXPECT_EQ(k.shm_bytes, 1u << 20);
  EXPECT_EQ(k.timeout_s, 300.0);
  EXPECT_TRUE(k.allreduce.empty());
  EXPECT_EQ(k.log_level, LogLevel::kWarning);
  EXPECT_EQ(k.malloc_policy, "keep");
  EXPECT_EQ(k.idle_backoff_ms, 8.0);
}

TEST(Knobs, ParsesEveryKnob) {
  const Knobs k = parse({{"TESSERA_RANKS_PER_NODE", "2"},
                         {"TESSERA_COLORS", "3"},
                         {"TESSERA_SEGMENT_BYTES", "64KiB"},
                         {"TESSERA_SHM_BYTES", "4M"},
                         {"TESSERA_TIMEOUT", "2.5"},
                         {"TESSERA_ALLREDUCE", "ring"},
                         {"TESSERA_LOG_LEVEL", "debug"},
                         {"TESSERA_COST_TABLE", "/tmp/t.json"},
                         {"TESSERA_MALLOC_POLICY", "system"},
                         {"TESSERA_IDLE_BACKOFF", "20"}});
  EXPECT_EQ(k.malloc_policy, "system");
  EXPECT_EQ(k.idle_backoff_ms, 20.0);
  EXPECT_EQ(k.ranks_per_node, 2);
  EXPECT_EQ(k.colors, 3);
  EXPECT_EQ(k.segment_bytes, 64u << 10);
  EXPECT_EQ(k.shm_bytes, 4u << 20);
  EXPECT_EQ(k.timeout_s, 2.5);
  EXPECT_EQ(k.allreduce, "ring");
  EXPECT_EQ(k.log_level, LogLevel::kDebug);
  EXPECT_EQ(k.cost_table, "/tmp/t.json");
  EXPECT_TRUE(k.is_explicit("TESSERA_COLORS"));
  EXPECT_FALSE(k.is_explicit("TESSERA_CYCLE_TIME"));
  EXPECT_EQ(k.set_explicitly.size(), 10u);
}

TEST(Knobs, ParsesTheAutotunersKnobs) {
  const Knobs k = parse({{"TESSERA_AUTOTUNE", "1"},
                         {"TESSERA_AUTOTUNE_LOG", "a.jsonl"},
                         {"TESSERA_AUTOTUNE_CONFIG", "b.json"},
                         {"TESSERA_AUTOTUNE_WARMUP_STEPS", "0"},
                         {"TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", "7"},
                         {"TESSERA_AUTOTUNE_SAMPLES", "5"},
                         {"TESSERA_AUTOTUNE_BAYES_TRIALS", "20"},
                         {"TESSERA_AUTOTUNE_BOUNDS", "colors=2-3"}});
  EXPECT_TRUE(k.autotune);
  EXPECT_EQ(k.autotune_log, "a.jsonl");
  EXPECT_EQ(k.autotune_config, "b.json");
  EXPECT_EQ(k.autotune_warmup_steps, 0);
  EXPECT_EQ(k.autotune_steps_per_sample, 7);
  EXPECT_EQ(k.autotune_samples, 5);
  EXPECT_EQ(k.autotune_bayes_trials, 20);
  EXPECT_EQ(k.autotune_bounds, "colors=2-3");
  EXPECT_THROW(parse({{"TESSERA_AUTOTUNE", "yes"}}), InvalidArgument);
  EXPECT_THROW(parse({{"TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}), InvalidArgument);
}

TEST(Knobs, BadValuesQuoteTheKnobTheValueAndWhatIsAccepted) {
  const std::map<std::string, std::string> bad[] = {
      {{"TESSERA_RANKS_PER_NODE", "two"}}, {{"TESSERA_RANKS_PER_NODE", "-1"}},
      {{"TESSERA_COLORS", "0"}},           {{"TESSERA_COLORS", "17"}},
      {{"TESSERA_SEGMENT_BYTES", "12Q"}},  {{"TESSERA_SEGMENT_BYTES", "10"}},
      {{"TESSERA_SHM_BYTES", "2G"}},       {{"TESSERA_TIMEOUT", "0"}},
      {{"TESSERA_TIMEOUT", "soon"}},       {{"TESSERA_LOG_LEVEL", "loud"}},
      {{"TESSERA_MALLOC_POLICY", "fast"}}, {{"TESSERA_IDLE_BACKOFF", "-1"}},
  };
  for (const auto& env : bad) {
    const std::string name = env.begin()->first, value = env.begin()->second;
    try {
      parse(env);
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(name + "='" + value + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("accepted"), std::string::npos) << what;
    }
  }
}

TEST(Knobs, ParseBytes) {
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64K"), 65536u);
  EXPECT_EQ(parse_bytes("64KiB"), 65536u);
  EXPECT_EQ(parse_bytes("1M"), 1u << 20);
  EXPECT_EQ(parse_bytes("2GiB"), size_t{2} << 30);
  EXPECT_THROW(parse_bytes(""), InvalidArgument);
  EXPECT_THROW(parse_bytes("K"), InvalidArgument);
  EXPECT_THROW(parse_bytes("12 MB"), InvalidArgument);
  EXPECT_THROW(parse_bytes("99999999999999999999"), InvalidArgument);
  EXPECT_THROW(parse_bytes("17179869184G"), InvalidArgument);  // overflows size_t
}

TEST(Knobs, DocsListEveryKnob) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/docs/knobs.md");
  ASSERT_TRUE(in.good()) << "docs/knobs.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const KnobInfo& k : knob_table()) {
    EXPECT_NE(doc.find(std::string("`") + k.name + "`"), std::string::npos)
        << k.name << " is not listed in docs/knobs.md";
  }
}

}  // namespace
}  // namespace tessera
