// Byte-for-byte conformance with Python's Jinja2: every case of gen_expectations.py
// (snippets per construct, our templates and the real templates in
// $TREESPEC_SHARED/data/chat_templates when present, x conversations x generation
// prompt) is rendered here and compared with what Jinja2 rendered.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <map>

#include "chat/template.h"
#include "common/test_util.h"
#include "conformance.h"

namespace treespec::test {

namespace {

std::string shared_templates_dir() { return shared_dir() + "/data/chat_templates"; }

}  // namespace

const Expectations& jinja2_expectations(const std::string& group, const std::string& shared_templates) {
  static std::map<std::string, Expectations> cache;
  const std::string key = group + "|" + shared_templates;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Expectations& e = cache[key];
  const std::string script = std::string(TREESPEC_SOURCE_DIR) + "/tests/unit/chat/gen_expectations.py";
  if (run_command("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
    e.why_not = "python3 with jinja2 is not installed (Debian: python3-jinja2; scripts/setup.sh installs it)";
    return e;
  }
  std::string cmd = "python3 " + shell_quote(script) + " --only " + group;
  if (!shared_templates.empty()) cmd += " --shared-templates " + shell_quote(shared_templates);
  std::string out;
  if (run_command(cmd, &out) != 0) {
    e.why_not = "gen_expectations.py failed";
    return e;
  }
  e.doc = nlohmann::ordered_json::parse(out);
  e.available = true;
  return e;
}

namespace {

#define REQUIRE_JINJA2(exp)                                                 \
  do {                                                                      \
    if (!(exp).available) {                                                 \
      if (ci_mode()) FAIL() << (exp).why_not << " (required when CI=true)"; \
      GTEST_SKIP() << (exp).why_not;                                        \
    }                                                                       \
  } while (0)

std::tm fixed_now(const std::string& ymd) {
  std::tm tm{};
  strptime(ymd.c_str(), "%Y-%m-%d", &tm);
  tm.tm_isdst = -1;
  std::time_t t = std::mktime(&tm);
  localtime_r(&t, &tm);
  return tm;
}

// Python exception names that our TemplateError::kind() must reproduce.
bool kind_matches(const std::string& py, const std::string& ours) {
  if (py == "TemplateError" || py == "UndefinedError" || py == "SecurityError") return py == ours;
  if (py == "TemplateSyntaxError" || py == "TemplateAssertionError")
    return ours == "TemplateSyntaxError" || ours == "TemplateAssertionError";
  return true;  // TypeError, ValueError, ...: any error will do
}

struct Tally {
  int checked = 0;
  int failed = 0;
};

void check_cases(const nlohmann::ordered_json& doc, const std::string& prefix, Tally& tally) {
  chat::RenderOptions opt;
  opt.now = fixed_now(doc["now"].get<std::string>());
  for (const auto& c : doc["cases"]) {
    const std::string name = c["name"].get<std::string>();
    if (name.rfind(prefix, 0) != 0) continue;
    ++tally.checked;
    std::string got;
    std::string err_kind, err_msg;
    try {
      chat::Template t(c["template"].get<std::string>(), opt);
      got = t.render(c["vars"]);
    } catch (const chat::TemplateError& e) {
      err_kind = e.kind();
      err_msg = e.what();
    }
    const bool ok = c["ok"].get<bool>();
    if (ok) {
      if (!err_kind.empty()) {
        ++tally.failed;
        ADD_FAILURE() << name << ": Jinja2 rendered, we raised " << err_kind << ": " << err_msg
                      << "\nexpected: " << c["output"].get<std::string>();
      } else if (got != c["output"].get<std::string>()) {
        ++tally.failed;
        ADD_FAILURE() << name << ": output differs\nexpected: " << nlohmann::json(c["output"]).dump()
                      << "\n     got: " << nlohmann::json(got).dump();
      }
      continue;
    }
    const std::string py_type = c["error_type"].get<std::string>();
    if (err_kind.empty()) {
      ++tally.failed;
      ADD_FAILURE() << name << ": Jinja2 raised " << py_type << " (" << c["error_message"].get<std::string>()
                    << "), we rendered " << nlohmann::json(got).dump();
    } else if (!kind_matches(py_type, err_kind)) {
      ++tally.failed;
      ADD_FAILURE() << name << ": Jinja2 raised " << py_type << ", we raised " << err_kind << ": " << err_msg;
    } else if (py_type == "TemplateError" && err_msg != c["error_message"].get<std::string>()) {
      ++tally.failed;
      ADD_FAILURE() << name << ": raise_exception message differs: expected '" << c["error_message"].get<std::string>()
                    << "', got '" << err_msg << "'";
    }
  }
}

TEST(ChatConformance, SnippetsMatchJinja2) {
  const auto& exp = jinja2_expectations("snippets");
  REQUIRE_JINJA2(exp);
  Tally t;
  check_cases(exp.doc, "snippet/", t);
  EXPECT_GT(t.checked, 150);
  RecordProperty("cases", t.checked);
  std::printf("[ snippets ] %d cases, %d differ (Jinja2 %s)\n", t.checked, t.failed,
              exp.doc["jinja2_version"].get<std::string>().c_str());
}

TEST(ChatConformance, OurTemplatesMatchJinja2) {
  const auto& exp = jinja2_expectations("ours");
  REQUIRE_JINJA2(exp);
  Tally t;
  check_cases(exp.doc, "ours/", t);
  EXPECT_GT(t.checked, 40);
  std::printf("[ ours ] %d template x conversation cases, %d differ\n", t.checked, t.failed);
}

TEST(ChatConformance, RealTemplatesFromSharedMatchJinja2) {
  const std::string dir = shared_templates_dir();
  if (!std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "no real chat templates: " << dir
                 << " does not exist (put Hugging Face templates there as <family>.jinja)";
  }
  const auto& exp = jinja2_expectations("shared", dir);
  REQUIRE_JINJA2(exp);
  Tally t;
  check_cases(exp.doc, "shared/", t);
  EXPECT_GT(t.checked, 0) << "no *.jinja files in " << dir;
  std::printf("[ shared ] %d template x conversation cases, %d differ\n", t.checked, t.failed);
}

}  // namespace

}  // namespace treespec::test
