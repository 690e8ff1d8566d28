// StopText: text is released as soon as it cannot start a stop string, held back while it might, and
// cut before the first stop string that completes, across any split into pieces.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/stop_text.h"

namespace ferry::serve {
namespace {

// Feeds `pieces` and returns what was shown, with the stop flag.
std::string feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* found) {
  StopText st(stops);
  std::string out;
  for (const std::string& p : pieces) out += st.push(p);
  out += st.flush();
  *found = st.found();
  return out;
}

TEST(StopText, NoStopsPassesEverythingAtOnce) {
  StopText st({});
  EXPECT_EQ(st.push("Hello"), "Hello");
  EXPECT_EQ(st.push(" world"), " world");
  EXPECT_EQ(st.flush(), "");
  EXPECT_FALSE(st.found());
}

TEST(StopText, CutsBeforeTheStopAcrossPieces) {
  bool found = false;
  EXPECT_EQ(feed({"END"}, {"one two E", "N", "D three"}, &found), "one two ");
  EXPECT_TRUE(found);
  EXPECT_EQ(feed({"\n\n"}, {"a\n", "\nb"}, &found), "a");
  EXPECT_TRUE(found);
}

TEST(StopText, HoldsBackOnlyAPossibleStart) {
  StopText st({"END"});
  EXPECT_EQ(st.push("xE"), "x");   // "E" may start END
  EXPECT_EQ(st.push("Nd"), "ENd"); // "ENd" cannot
  EXPECT_EQ(st.push("EN"), "");
  EXPECT_EQ(st.flush(), "EN");     // never completed: shown at the end
  EXPECT_FALSE(st.found());
}

TEST(StopText, EarliestStopWins) {
  bool found = false;
  EXPECT_EQ(feed({"cd", "b"}, {"abcd"}, &found), "a");
  EXPECT_TRUE(found);
  // After the stop, nothing more.
  StopText st({"x"});
  EXPECT_EQ(st.push("axb"), "a");
  EXPECT_EQ(st.push("more"), "");
  EXPECT_EQ(st.flush(), "");
}

TEST(StopText, MultiByteStopKeepsUtf8Whole) {
  bool found = false;
  // "é" is two bytes; the stop "éa" shares its first character with the text "éb".
  EXPECT_EQ(feed({"\xC3\xA9" "a"}, {"x\xC3\xA9", "b"}, &found), "x\xC3\xA9" "b");
  EXPECT_FALSE(found);
  EXPECT_EQ(feed({"\xC3\xA9" "a"}, {"x\xC3\xA9", "a!"}, &found), "x");
  EXPECT_TRUE(found);
}

TEST(StopText, EmptyStopStringsAreIgnored) {
  bool found = false;
  EXPECT_EQ(feed({"", "zz"}, {"abc"}, &found), "abc");
  EXPECT_FALSE(found);
}

}  // namespace
}  // namespace ferry::serve
