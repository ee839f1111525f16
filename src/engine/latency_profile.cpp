#include "engine/latency_profile.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/log.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace treespec::engine {
namespace fs = std::filesystem;

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 1);
    }
  }
  return "unknown";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string profile_path(const std::string& dir, const std::string& key) {
  return fmt::format("{}/latency-{:016x}.json", dir, fnv1a(key));
}

}  // namespace

std::string latency_cache_dir() {
  if (const char* d = std::getenv("TREESPEC_CACHE_DIR"); d != nullptr) {
    const std::string s = d;
    return s == "off" ? std::string() : s;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/treespec";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/treespec";
  return {};
}

std::string latency_profile_key(const Engine& eng, int32_t n_max, int32_t ctx, double max_ratio, int32_t reps) {
  const std::string path = eng.model().gguf().path();
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).string();
  const auto size = fs::file_size(path, ec);
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  const EngineParams& p = eng.params();
  return fmt::format(
      "v1|model={}|size={}|mtime={}|threads={}|isa={}|cpu={}|ctk={}|ctv={}|cells={}|free={}|n_max={}|ctx={}|ratio={}|"
      "reps={}",
      abs.empty() ? path : abs, ec ? 0 : size, mtime, p.n_threads, kernels::isa_name(kernels::active_isa()),
      cpu_model(), tensor::dtype_name(p.type_k), tensor::dtype_name(p.type_v), eng.kv().n_cells(), eng.free_slots(),
      n_max, ctx, max_ratio, reps);
}

std::optional<std::vector<LatencyPoint>> load_latency_profile(const std::string& key) {
  const std::string dir = latency_cache_dir();
  if (dir.empty()) return std::nullopt;
  const std::string path = profile_path(dir, key);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("key").get<std::string>() != key) return std::nullopt;  // a hash collision or an old format
    std::vector<LatencyPoint> out;
    for (const auto& p : j.at("points")) {
      LatencyPoint q{p.at(0).get<double>(), p.at(1).get<double>(), p.at(2).get<double>(), p.at(3).get<double>()};
      if (!(q[0] >= 1.0 && q[1] >= 1.0 && q[2] >= 0.0 && q[3] > 0.0)) return std::nullopt;
      out.push_back(q);
    }
    if (out.empty()) return std::nullopt;
    return out;
  } catch (const std::exception& e) {
    TS_LOG_DEBUG("latency profile {}: unreadable ({}); sweeping again", path, e.what());
    return std::nullopt;
  }
}

void save_latency_profile(const std::string& key, const std::vector<LatencyPoint>& points) {
  const std::string dir = latency_cache_dir();
  if (dir.empty() || points.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = profile_path(dir, key);
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  nlohmann::json j;
  j["key"] = key;
  j["points"] = points;
  {
    std::ofstream out(tmp);
    out << j.dump(1) << '\n';
    if (!out) {
      TS_LOG_DEBUG("latency profile {}: cannot write", tmp);
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    TS_LOG_DEBUG("latency profile {}: {}", path, ec.message());
    fs::remove(tmp, ec);
  }
}

}  // namespace treespec::engine
