// Progress bar with ETA for long sweeps, on stderr (stdout carries the table). On a
// terminal it redraws one line (at most 10 times a second); otherwise it prints a line
// per 10% so logs stay short.
#pragma once

#include <cstdint>
#include <cstdio>

namespace treespec::bench {

class Progress {
 public:
  Progress(FILE* out, int64_t total);  // out == nullptr: silent
  void advance(int64_t n);
  void finish();

 private:
  void draw(bool force);
  FILE* out_;
  int64_t total_;
  int64_t done_ = 0;
  double t0_;
  double last_draw_ = 0.0;
  int last_decile_ = -1;
  bool tty_ = false;
  bool finished_ = false;
};

}  // namespace treespec::bench
