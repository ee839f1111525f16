// Method specs (--spec / --method), number lists, budgets.
#include <gtest/gtest.h>

#include "bench/method_spec.h"
#include "treespec/status.h"

using namespace treespec;
using bench::MethodSpec;

namespace {
const std::vector<std::string> kKnown = {"none", "lookup", "medusa", "propd"};
using Params = std::vector<std::pair<std::string, std::string>>;
}  // namespace

TEST(MethodSpec, ItemsWithParameters) {
  MethodSpec m = bench::parse_method_item("lookup");
  EXPECT_EQ(m.name, "lookup");
  EXPECT_TRUE(m.params.empty());
  EXPECT_EQ(m.label, "lookup");

  m = bench::parse_method_item("lookup:draft=4:branches=2");
  EXPECT_EQ(m.params, (Params{{"draft", "4"}, {"branches", "2"}}));
  EXPECT_EQ(m.to_flags(), (std::vector<std::string>{"--lookup-draft", "4", "--lookup-branches", "2"}));

  // A value may hold ':' when the next segment does not look like a key.
  m = bench::parse_method_item("medusa:tree=auto:32");
  EXPECT_EQ(m.params, (Params{{"tree", "auto:32"}}));
  EXPECT_EQ(m.label, "medusa:tree=auto:32");
  EXPECT_EQ(m.to_flags(), (std::vector<std::string>{"--medusa-tree", "auto:32"}));

  m = bench::parse_method_item("propd:no-prune:static-tree");
  EXPECT_EQ(m.params, (Params{{"no-prune", ""}, {"static-tree", ""}}));
  EXPECT_EQ(m.to_flags(), (std::vector<std::string>{"--propd-no-prune", "--propd-static-tree"}));

  // Raw flags pass through verbatim.
  m = bench::parse_method_item("propd:--verify=typical");
  EXPECT_EQ(m.to_flags(), (std::vector<std::string>{"--verify", "typical"}));
}

TEST(MethodSpec, MethodArgumentUsesCommas) {
  MethodSpec m = bench::parse_method_arg("medusa:tree=auto:32,heads=3");
  EXPECT_EQ(m.name, "medusa");
  EXPECT_EQ(m.params, (Params{{"tree", "auto:32"}, {"heads", "3"}}));
  EXPECT_EQ(m.label, "medusa:tree=auto:32:heads=3");
  EXPECT_THROW(bench::parse_method_arg("medusa:tree=1,,x=2"), InvalidArgument);
}

TEST(MethodSpec, ListsAndAll) {
  auto v = bench::parse_spec_list("none,lookup,medusa:tree=auto:32,propd:no-prune", kKnown);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[2].params, (Params{{"tree", "auto:32"}}));
  EXPECT_EQ(v[3].label, "propd:no-prune");
  EXPECT_FALSE(v[1].from_all);

  v = bench::parse_spec_list("all", kKnown);
  ASSERT_EQ(v.size(), kKnown.size());
  EXPECT_TRUE(v[1].from_all);

  // Naming a method next to "all" makes it required again.
  v = bench::normalize_methods(bench::parse_spec_list("all,lookup", kKnown), kKnown);
  ASSERT_EQ(v.size(), kKnown.size());
  EXPECT_EQ(v[0].name, "none");
  EXPECT_FALSE(v[1].from_all);
  EXPECT_TRUE(v[2].from_all);
}

TEST(MethodSpec, NormalizePutsNoneFirstAndAddsIt) {
  auto v = bench::normalize_methods(bench::parse_spec_list("lookup,lookup:draft=2", kKnown), kKnown);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].label, "none");
  EXPECT_EQ(v[1].label, "lookup");
  EXPECT_EQ(v[2].label, "lookup:draft=2");

  v = bench::normalize_methods(bench::parse_spec_list("lookup,none,lookup", kKnown), kKnown);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].label, "none");
}

TEST(MethodSpec, Errors) {
  try {
    bench::normalize_methods(bench::parse_spec_list("lookup,fancy", kKnown), kKnown);
    FAIL() << "unknown method accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'fancy'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lookup"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bench::normalize_methods({bench::parse_method_item("none:x=1")}, kKnown), InvalidArgument);
  EXPECT_THROW(bench::parse_spec_list("none,,lookup", kKnown), InvalidArgument);
  EXPECT_THROW(bench::parse_method_item("lookup:"), InvalidArgument);
  EXPECT_THROW(bench::parse_method_item(":draft=1"), InvalidArgument);
  EXPECT_THROW(bench::parse_method_item("lookup:draft="), InvalidArgument);
  EXPECT_THROW(bench::parse_method_item("lookup:4"), InvalidArgument);  // a value with no key
  EXPECT_THROW(bench::parse_method_item("look up"), InvalidArgument);
}

TEST(MethodSpec, IntAndBudgetLists) {
  EXPECT_EQ(bench::parse_int_list("1,2,4,8", "--batch", 1, 256), (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(bench::parse_int_list(" 4 , 4,1", "--batch", 1, 256), (std::vector<int32_t>{4, 1}));
  EXPECT_THROW(bench::parse_int_list("1,x", "--batch", 1, 256), InvalidArgument);
  EXPECT_THROW(bench::parse_int_list("0", "--batch", 1, 256), InvalidArgument);
  EXPECT_THROW(bench::parse_int_list("3.5", "--batch", 1, 256), InvalidArgument);
  EXPECT_THROW(bench::parse_int_list("", "--batch", 1, 256), InvalidArgument);
  try {
    bench::parse_int_list("1,999", "--batch", 1, 256);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--batch"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("999"), std::string::npos);
  }
  EXPECT_EQ(bench::parse_budget_list("own,8,16,32,64"), (std::vector<int32_t>{0, 8, 16, 32, 64}));
  // `auto` is the budget controller, as in run and serve: an alias of `dynamic`.
  EXPECT_EQ(bench::parse_budget_list("auto,dynamic,own"), (std::vector<int32_t>{bench::kBudgetDynamic, 0}));
  EXPECT_THROW(bench::parse_budget_list("0"), InvalidArgument);
  EXPECT_THROW(bench::parse_budget_list("big"), InvalidArgument);
  EXPECT_EQ(bench::budget_label(0), "own");
  EXPECT_EQ(bench::budget_label(bench::kBudgetDynamic), "dynamic");
  EXPECT_EQ(bench::budget_label(16), "16");
}
