// The files through which `tessera run`'s supervisor and the ranks of an elastic job talk
// (runtime/elastic.h): failure records, the hosts-updated notice, the restart marker.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/error.h"
#include "runtime/elastic.h"

namespace tessera {
namespace runtime {
namespace {

std::string temp_dir() {
  char pattern[] = "/tmp/tessera-elastic-XXXXXX";
  const char* made = mkdtemp(pattern);
  EXPECT_NE(made, nullptr);
  return made ? made : "/tmp";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ElasticRecord, RoundTripsEveryField) {
  FailureRecord r{
      3, 2, "h1", 41, "rank 2: rank 3 (host h1) stopped \"answering\"", {{3, "h1"}, {0, "h0"}}};
  const FailureRecord back = decode_failure_record(encode_failure_record(r), "x");
  EXPECT_EQ(back.generation, 3);
  EXPECT_EQ(back.rank, 2);
  EXPECT_EQ(back.host, "h1");
  EXPECT_EQ(back.step, 41);
  EXPECT_EQ(back.reason, r.reason);
  ASSERT_EQ(back.lost.size(), 2u);
  EXPECT_EQ(back.lost[0], (std::pair<int, std::string>{3, "h1"}));
  EXPECT_EQ(back.lost[1], (std::pair<int, std::string>{0, "h0"}));
}

TEST(ElasticRecord, RefusesWhatIsNoRecordNamingTheSource) {
  for (const std::string bad : {"", "{}", "[1]", "{\"generation\": 1}", "not json",
                                R"({"generation":1,"rank":"x","host":"h","step":1,"reason":"",
                                    "lost":[]})"}) {
    try {
      decode_failure_record(bad, "failures/g1.r0.json");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("failures/g1.r0.json is not a failure record"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ElasticRecord, HostsUpdateAppliesToItsGenerationOnly) {
  const std::string dir = temp_dir();
  EXPECT_FALSE(hosts_update_pending(dir, 0));  // no notice
  std::ofstream(dir + "/hosts-updated") << "2\n";
  EXPECT_FALSE(hosts_update_pending(dir, 1));
  EXPECT_TRUE(hosts_update_pending(dir, 2));
  EXPECT_FALSE(hosts_update_pending(dir, 3));
  std::ofstream(dir + "/hosts-updated") << "garbage\n";
  EXPECT_FALSE(hosts_update_pending(dir, 2));
  std::system(("rm -rf " + dir).c_str());
}

TEST(ElasticRecord, RanksWriteRecordsOnlyInAnElasticJob) {
  const std::string dir = temp_dir();
  configure_elastic({});
  EXPECT_FALSE(elastic_enabled());
  record_failure(1, "h0", "ignored", {});
  EXPECT_NE(access((dir + "/failures").c_str(), F_OK), 0);

  configure_elastic({{"TESSERA_ELASTIC_DIR", dir}, {"TESSERA_ELASTIC_GENERATION", "4"}});
  ASSERT_TRUE(elastic_enabled());
  EXPECT_EQ(elastic_generation(), 4);
  set_progress_step(17);
  record_failure(1, "h0", "rank 1: rank 2 stopped answering", {{2, "h1"}});
  const FailureRecord r = decode_failure_record(slurp(failure_record_path(dir, 4, 1)), "record");
  EXPECT_EQ(r.generation, 4);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.step, 17);
  EXPECT_EQ(r.lost.size(), 1u);
  // The first cause stands: the launcher's later word on this rank does not replace it.
  record_failure(1, "h0", "rank 1 was terminated by the launcher", {{0, "h0"}});
  EXPECT_EQ(decode_failure_record(slurp(failure_record_path(dir, 4, 1)), "r").reason,
            "rank 1: rank 2 stopped answering");
  record_own_failure(3, "ValueError: a planted bug");
  const FailureRecord own = decode_failure_record(slurp(failure_record_path(dir, 4, 3)), "own");
  EXPECT_EQ(own.reason, "rank 3 failed: ValueError: a planted bug");
  ASSERT_EQ(own.lost.size(), 1u);
  EXPECT_EQ(own.lost[0].first, 3);
  EXPECT_EQ(own.lost[0].second, own.host);
  EXPECT_FALSE(own.host.empty());
  mark_restart_for_hosts();
  EXPECT_EQ(slurp(restart_marker_path(dir, 4)), "4\n");
  configure_elastic({});
  set_progress_step(-1);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace runtime
}  // namespace tessera
