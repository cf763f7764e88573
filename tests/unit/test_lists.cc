// The data-set list grammars (data/lists.h): the CSV manifest, split files and classes.txt,
// every error naming the file and the line.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "data/lists.h"

namespace tessera {
namespace data {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Lists, ManifestLinesWithHeaderBlanksCommasInPathsAndWindowsLineEnds) {
  const auto m = parse_manifest("path,label\r\n a/b.png , 3 \r\n\n  \nx,y.jpg,0\n/abs.png,12", "m");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].path, "a/b.png");
  EXPECT_EQ(m[0].label, 3);
  EXPECT_EQ(m[0].line, 2);
  EXPECT_EQ(m[1].path, "x,y.jpg");  // the label is after the last comma
  EXPECT_EQ(m[1].label, 0);
  EXPECT_EQ(m[1].line, 5);
  EXPECT_EQ(m[2].path, "/abs.png");
  EXPECT_EQ(m[2].label, 12);
}

TEST(Lists, ManifestHeaderOnlyOnTheFirstLine) {
  // "path,label" later is a line whose label "label" is not a number.
  EXPECT_NE(error_of([] {
              parse_manifest("a.png,1\npath,label\n", "m.csv");
            }).find("m.csv:2: label 'label' is not an integer >= 0"),
            std::string::npos);
}

TEST(Lists, ManifestErrorsNameFileLineAndWhatIsAccepted) {
  EXPECT_NE(error_of([] {
              parse_manifest("a.png\n", "m.csv");
            }).find("m.csv:1: expected 'path,label', got 'a.png'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_manifest("ok.png,1\n ,2\n", "m.csv");
            }).find("m.csv:2: the path before the label is empty"),
            std::string::npos);
  for (const char* bad : {"a.png,", "a.png,-1", "a.png,1.5", "a.png,3x",
                          "a.png,99999999999999999999", "a.png,0x10"}) {
    EXPECT_NE(error_of([&] { parse_manifest(bad, "m.csv"); }).find("m.csv:1: label"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([] { parse_manifest("path,label\n\n", "m.csv"); }).find("lists no samples"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_manifest(std::string("a.png,1\n\0", 9), "m.csv");
            }).find("holds a NUL byte"),
            std::string::npos);
  // Control characters are shown as '?' so the message stays one line.
  EXPECT_NE(error_of([] { parse_manifest("a\x1b[2J.png\n", "m.csv"); }).find("'a?[2J.png'"),
            std::string::npos);
}

TEST(Lists, SplitIdsTrimmedBlanksSkipped) {
  const auto ids = parse_split("2007_000032\r\n\n  2007_000039  \n", "val.txt");
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], "2007_000032");
  EXPECT_EQ(ids[1], "2007_000039");
}

TEST(Lists, SplitIdsCannotLeaveTheDataSet) {
  for (const char* bad : {"../secret", "a/b", "a\\b", "..", "."}) {
    EXPECT_NE(
        error_of([&] { parse_split(std::string("ok\n") + bad, "val.txt"); }).find("val.txt:2: id"),
        std::string::npos)
        << bad;
  }
  EXPECT_NE(error_of([] { parse_split(" \n\n", "val.txt"); }).find("'val.txt' lists no ids"),
            std::string::npos);
}

TEST(Lists, ClassNamesKeepInnerSpaces) {
  const auto names = parse_class_names("background\r\n\npotted plant  \n", "classes.txt");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "potted plant");
  EXPECT_NE(error_of([] { parse_class_names("\n \r\n", "classes.txt"); }).find("names no class"),
            std::string::npos);
}

TEST(Lists, ReadTextFileNamesTheMissingFile) {
  EXPECT_NE(error_of([] {
              read_text_file("/nonexistent/m.csv", "manifest");
            }).find("manifest '/nonexistent/m.csv' is missing or unreadable"),
            std::string::npos);
}

}  // namespace
}  // namespace data
}  // namespace tessera
