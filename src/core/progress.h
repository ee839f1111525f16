// The one progress display (bench sweeps, train-heads' phases): a bar with elapsed time
// and ETA on a stream, normally stderr (stdout carries tables and results). On a
// terminal it redraws one line in place (at most 10 times a second, and always when a
// phase starts or completes); otherwise it prints a line per 10% of each phase so logs
// stay short. A line reads
//   PHASE    [=========>              ]  40% 4/10 DETAIL  elapsed 0:12  ETA 0:18
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace treespec::core {

class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out);  // nullptr: silent

  // `done` of `total` in `phase`; `detail` follows the count as it is (e.g. "  loss 0.1234");
  // elapsed and ETA in seconds, negative when unknown. A new phase starts a new line.
  void show(std::string_view phase, int64_t done, int64_t total, double elapsed_s, double eta_s,
            std::string_view detail = {});
  // On a terminal: redraws the latest state and ends its line. Idempotent.
  void finish();

  // "m:ss" or "h:mm:ss"; "--:--" when negative or absurdly large.
  static std::string duration(double s);

 private:
  void draw();
  std::FILE* out_;
  bool tty_ = false;
  bool drawn_ = false;  // something of the current phase is on screen
  std::string phase_, line_;
  int decile_ = -1;
  double last_draw_ = -1.0;
};

// Units of one phase counted against a fixed total, timed from construction; ETA from the
// mean time per unit so far.
class ProgressCounter {
 public:
  ProgressCounter(std::FILE* out, std::string phase, int64_t total, const std::string& unit);
  void advance(int64_t n);
  void finish() { bar_.finish(); }

 private:
  ProgressBar bar_;
  std::string phase_, detail_;
  int64_t total_, done_ = 0;
  double t0_;
};

}  // namespace treespec::core
