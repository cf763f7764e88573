// The settings mechanism (src/common/settings.h) and each layer's declarations: defaults,
// parsing, errors that name the setting, the value and the accepted range, the precedence of
// the sources, unknown names with the nearest known one, and the disagreement report.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/settings.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/settings.h"
#include "engine/options.h"
#include "runtime/liveness.h"
#include "tune/autotuner.h"
#include "tune/settings.h"

namespace tessera {
namespace {

// What `fn` throws (InvalidArgument), or "" when it does not throw.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<SettingInfo> every_torch_free_setting() {
  std::vector<SettingInfo> all = {kLogLevel.info(), runtime::kHeartbeatTimeout.info()};
  for (const auto& layer :
       {comm::declared_settings(), engine::declared_settings(), tune::declared_settings()}) {
    all.insert(all.end(), layer.begin(), layer.end());
  }
  return all;
}

TEST(Settings, DefaultsWhenUnset) {
  const comm::Settings c = comm::settings_from({});
  EXPECT_EQ(c.ranks_per_node, 0);
  EXPECT_EQ(c.colors, 4);
  EXPECT_EQ(c.segment_bytes, 256u << 10);
  EXPECT_EQ(c.shm_bytes, 1u << 20);
  EXPECT_EQ(c.timeout_s, 300.0);
  EXPECT_TRUE(c.allreduce.empty());
  EXPECT_TRUE(c.allreduce_ranges.empty());
  const engine::EngineOptions e = engine::options_from({});
  EXPECT_EQ(e.tunables.cycle_time_ms, 1.0);
  EXPECT_EQ(e.tunables.fusion_threshold, size_t{128} << 20);
  EXPECT_TRUE(e.tunables.cache_enabled);
  EXPECT_EQ(e.tunables.colors, 4);
  EXPECT_EQ(e.idle_backoff_ms, 8.0);
  EXPECT_EQ(e.cache_capacity, 1024u);
  EXPECT_EQ(e.stall_shutdown_s, 300.0);
  // A default-constructed struct holds the same defaults as parsing nothing.
  EXPECT_EQ(engine::Tunables{}, e.tunables);
  const tune::TunerOptions t = tune::TunerOptions::from({});
  EXPECT_EQ(t.warmup_steps, 5);
  EXPECT_EQ(t.bayes_trials, 10);
  EXPECT_EQ(kLogLevel.get({}), "warning");
  EXPECT_FALSE(tune::autotune_requested({}));
}

TEST(Settings, EachLayerParsesItsOwn) {
  const SettingValues v = {{"TESSERA_RANKS_PER_NODE", "2"},    {"TESSERA_COLORS", "3"},
                           {"TESSERA_SEGMENT_BYTES", "64KiB"}, {"TESSERA_SHM_BYTES", "4M"},
                           {"TESSERA_TIMEOUT", "2.5"},         {"TESSERA_ALLREDUCE", "ring"},
                           {"TESSERA_CYCLE_TIME", "0"},        {"TESSERA_CACHE_CAPACITY", "0"},
                           {"TESSERA_FUSION_THRESHOLD", "1M"}, {"TESSERA_IDLE_BACKOFF", "20"},
                           {"TESSERA_AUTOTUNE", "1"},          {"TESSERA_AUTOTUNE_SAMPLES", "7"}};
  const comm::Settings c = comm::settings_from(v);
  EXPECT_EQ(c.ranks_per_node, 2);
  EXPECT_EQ(c.colors, 3);
  EXPECT_EQ(c.segment_bytes, 64u << 10);
  EXPECT_EQ(c.shm_bytes, 4u << 20);
  EXPECT_EQ(c.timeout_s, 2.5);
  ASSERT_EQ(c.allreduce_ranges.size(), 1u);
  EXPECT_EQ(c.allreduce_ranges[0].algorithm, comm::Algorithm::kRing);
  const engine::EngineOptions e = engine::options_from(v);
  EXPECT_EQ(e.tunables.cycle_time_ms, 0.0);
  EXPECT_FALSE(e.tunables.cache_enabled);
  EXPECT_EQ(e.cache_capacity, 1024u);  // what turning the cache back on gives
  EXPECT_EQ(e.tunables.fusion_threshold, 1u << 20);
  EXPECT_EQ(e.idle_backoff_ms, 20.0);
  // The engine's communicator settings come from the same values.
  EXPECT_EQ(e.tunables.allreduce, "ring");
  EXPECT_EQ(e.tunables.colors, 3);
  EXPECT_EQ(e.tunables.segment_bytes, 64u << 10);
  EXPECT_EQ(e.timeout_s, 2.5);
  EXPECT_TRUE(tune::autotune_requested(v));
  EXPECT_EQ(tune::TunerOptions::from(v).samples, 7);
}

TEST(Settings, BadValuesNameTheSettingTheValueAndWhatIsAccepted) {
  struct Case {
    SettingValues v;
    std::string accepted;
  };
  const std::vector<Case> cases = {
      {{{"TESSERA_RANKS_PER_NODE", "two"}}, "an integer from 0 to 1048576"},
      {{{"TESSERA_RANKS_PER_NODE", "-1"}}, "an integer from 0 to 1048576"},
      {{{"TESSERA_COLORS", "0"}}, "an integer from 1 to 16"},
      {{{"TESSERA_COLORS", "17"}}, "an integer from 1 to 16"},
      {{{"TESSERA_SEGMENT_BYTES", "12Q"}}, "from 1KiB to 1GiB"},
      {{{"TESSERA_SEGMENT_BYTES", "10"}}, "from 1KiB to 1GiB"},
      {{{"TESSERA_SHM_BYTES", "2G"}}, "from 4KiB to 1GiB"},
      {{{"TESSERA_TIMEOUT", "0"}}, "a number > 0"},
      {{{"TESSERA_TIMEOUT", "soon"}}, "a number > 0"},
      {{{"TESSERA_ALLREDUCE", "ring:0-10;bogus:11-max"}}, "ALGO"},
      {{{"TESSERA_IDLE_BACKOFF", "-1"}}, "a number >= 0"},
      {{{"TESSERA_CACHE_CAPACITY", "2000000"}}, "an integer from 0 to 1048576"},
      {{{"TESSERA_STALL_CHECK_TIME", "0"}}, "a number > 0"},
      {{{"TESSERA_LOG_LEVEL", "loud"}}, "debug, info, warning, error"},
      {{{"TESSERA_AUTOTUNE", "yes"}}, "0, 1"},
      {{{"TESSERA_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, "an integer from 1 to 100000"},
      {{{"TESSERA_AUTOTUNE_BOUNDS", "cycle_time_ms=3-1"}}, "name=LO-HI"},
  };
  const std::vector<SettingInfo> known = every_torch_free_setting();
  for (const Case& c : cases) {
    const std::string name = c.v.begin()->first, value = c.v.begin()->second;
    SettingSources sources;
    sources.explicit_values = c.v;
    const ResolvedSettings r = resolve_settings(sources, known);
    EXPECT_TRUE(contains(r.error, name + "='" + value + "' is not accepted")) << r.error;
    EXPECT_TRUE(contains(r.error, "accepted: ")) << r.error;
    EXPECT_TRUE(contains(r.error, c.accepted)) << r.error;
  }
}

// Every combination of the three sources giving a value or not: the highest present wins, and
// the declared default stands when none gives one.
TEST(Settings, PrecedenceIsExplicitThenEnvironmentThenConfigFileThenDefault) {
  const std::string name = engine::kFusionThreshold.name;
  for (int mask = 0; mask < 8; ++mask) {
    SettingSources s;
    if (mask & 1) s.config_file[name] = "1KiB";
    if (mask & 2) s.environment[name] = "2KiB";
    if (mask & 4) s.explicit_values[name] = "4KiB";
    const size_t want = (mask & 4)   ? 4096
                        : (mask & 2) ? 2048
                        : (mask & 1) ? 1024
                                     : engine::kFusionThreshold.fallback;
    const ResolvedSettings r = resolve_settings(s, every_torch_free_setting());
    EXPECT_EQ(r.error, "") << mask;
    EXPECT_EQ(engine::options_from(r.values).tunables.fusion_threshold, want) << "mask " << mask;
  }
}

TEST(Settings, UnknownNamesNameTheNearestKnownOne) {
  const std::vector<SettingInfo> known = every_torch_free_setting();
  EXPECT_EQ(nearest_name("TESSERA_FUSION_TRESHOLD", known), "TESSERA_FUSION_THRESHOLD");
  EXPECT_EQ(nearest_name("TESSERA_COLOURS", known), "TESSERA_COLORS");
  EXPECT_EQ(nearest_name("TESSERA_FUSION", known), "TESSERA_FUSION_THRESHOLD");  // cut short
  EXPECT_EQ(nearest_name("TESSERA_AUTOTUNE_STEPS", known), "TESSERA_AUTOTUNE_STEPS_PER_SAMPLE");
  SettingSources explicit_typo;
  explicit_typo.explicit_values["TESSERA_FUSION_TRESHOLD"] = "1M";
  ResolvedSettings r = resolve_settings(explicit_typo, known);
  EXPECT_TRUE(contains(r.error,
                       "unknown setting TESSERA_FUSION_TRESHOLD (did you mean "
                       "TESSERA_FUSION_THRESHOLD?)"))
      << r.error;
  SettingSources config_typo;
  config_typo.config_file["TESSERA_CYCLE_TIMES"] = "2";
  r = resolve_settings(config_typo, known);
  EXPECT_TRUE(contains(r.error,
                       "unknown config file key TESSERA_CYCLE_TIMES (did you mean "
                       "TESSERA_CYCLE_TIME?)"))
      << r.error;
  // The environment is shared with launch scripts: a warning, and the name is dropped.
  SettingSources env;
  env.environment["TESSERA_SEGMENT_BYTE"] = "4K";
  env.environment["TESSERA_COLORS"] = "2";
  r = resolve_settings(env, known);
  EXPECT_EQ(r.error, "");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "TESSERA_SEGMENT_BYTE (did you mean TESSERA_SEGMENT_BYTES?)"))
      << r.warnings[0];
  EXPECT_EQ(r.values.count("TESSERA_SEGMENT_BYTE"), 0u);
  EXPECT_EQ(r.values.at("TESSERA_COLORS"), "2");
}

TEST(Settings, DisagreementNamesTheSettingAndTheRanks) {
  const std::vector<SettingValues> same = {{{"TESSERA_COLORS", "2"}}, {{"TESSERA_COLORS", "2"}}};
  EXPECT_EQ(settings_disagreement(same), "");
  const std::vector<SettingValues> differ = {
      {{"TESSERA_COLORS", "2"}, {"TESSERA_CYCLE_TIME", "1"}},
      {{"TESSERA_COLORS", "2"}},
      {{"TESSERA_COLORS", "3"}, {"TESSERA_CYCLE_TIME", "1"}},
      {{"TESSERA_COLORS", "2"}, {"TESSERA_CYCLE_TIME", "1"}}};
  const std::string why = settings_disagreement(differ);
  EXPECT_TRUE(contains(why,
                       "TESSERA_COLORS differs between ranks ('2' on ranks 0, 1, 3; '3' "
                       "on rank 2)"))
      << why;
  EXPECT_TRUE(contains(why,
                       "TESSERA_CYCLE_TIME differs between ranks ('1' on ranks 0, 2, 3; "
                       "unset on rank 1)"))
      << why;
}

TEST(Settings, ParseAndFormatBytes) {
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
  for (size_t b : {size_t{0}, size_t{1000}, size_t{1024}, size_t{1536}, size_t{128} << 20,
                   size_t{3} << 30, (size_t{1} << 40) + 1}) {
    EXPECT_EQ(parse_bytes(format_bytes(b)), b) << format_bytes(b);
  }
  EXPECT_EQ(format_bytes(size_t{256} << 10), "256KiB");
}

// Typed values written as text and read back give the same value.
TEST(Settings, FormatRoundTrips) {
  EXPECT_EQ(engine::kCycleTime.get({{engine::kCycleTime.name, engine::kCycleTime.format(0.1)}}),
            0.1);
  EXPECT_EQ(comm::kColors.get({{comm::kColors.name, comm::kColors.format(7)}}), 7);
  EXPECT_EQ(engine::kFusionThreshold.get(
                {{engine::kFusionThreshold.name, engine::kFusionThreshold.format(12345)}}),
            12345u);
}

TEST(Settings, EveryNameIsDeclaredOnce) {
  const std::vector<SettingInfo> all = every_torch_free_setting();
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].name.rfind("TESSERA_", 0), 0u) << all[i].name;
    ASSERT_TRUE(all[i].check) << all[i].name;
    all[i].check({});  // the default itself is accepted
    for (size_t j = i + 1; j < all.size(); ++j) EXPECT_NE(all[i].name, all[j].name);
  }
}

}  // namespace
}  // namespace tessera
