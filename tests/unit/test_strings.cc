#include <gtest/gtest.h>

#include "common/strings.h"

namespace tessera {
namespace {

TEST(Strings, TrimRemovesOnlyTheGivenCharactersAtEitherEnd) {
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("a"), "a");
  EXPECT_EQ(trim("\t a b \t"), "a b");  // inner space stays
  EXPECT_EQ(trim(" x\r"), "x\r");       // by default only spaces and tabs
  EXPECT_EQ(trim(" x\r\n", " \t\r\n"), "x");
  EXPECT_EQ(trim("\r\n", " \t\r\n"), "");
}

// The published FNV-1a 64 test vectors: checkpoints written on one machine must check on any.
TEST(Strings, Fnv1a64MatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  const std::string s = "foobar";
  EXPECT_EQ(fnv1a64(s.data(), 3), fnv1a64("foo"));
}

}  // namespace
}  // namespace tessera
