// Cached start-up latency sweeps (issue 20 item 3: a cold start without an expensive
// sweep). The sweep (probe_latency: synthetic verification forwards of 1, 2, 4, ... rows)
// depends only on the machine, the model file, the thread count, the KV types and the
// sweep's own settings, so its points are kept per (that key) in a small JSON file under
// the user's cache directory and reused by the next process with the same key: `run`,
// `bench` and `serve` start planning at once instead of spending 1-6 s on the sweep.
// The points stay priors of the latency model (they never age and weigh 0.25 of an
// online sample), so measured steps take over wherever the cached ones are off.
//
// Directory: $TREESPEC_CACHE_DIR, else $XDG_CACHE_HOME/treespec, else
// $HOME/.cache/treespec. TREESPEC_CACHE_DIR=off (or an empty value) turns the cache off.
// Reading or writing failures are logged at debug level and otherwise ignored: the
// sweep then runs as without a cache.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace treespec::engine {

class Engine;

// One sweep point: batch b, rows r, context s, seconds t.
using LatencyPoint = std::array<double, 4>;

// The cache directory (empty when the cache is off or no home is known).
std::string latency_cache_dir();

// The key of a sweep on this engine with these settings: model file (path, size, mtime),
// threads, kernel ISA, CPU model, KV types and cells, free slots, and the sweep's own
// n_max, ctx, max_ratio and reps.
std::string latency_profile_key(const Engine& eng, int32_t n_max, int32_t ctx, double max_ratio, int32_t reps);

// The cached points of `key`, if a profile with exactly this key exists.
std::optional<std::vector<LatencyPoint>> load_latency_profile(const std::string& key);
// Stores the points of `key` (atomically: a temporary file renamed into place).
void save_latency_profile(const std::string& key, const std::vector<LatencyPoint>& points);

}  // namespace treespec::engine
