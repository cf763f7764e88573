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

}  // namespace
}  // namespace tessera
