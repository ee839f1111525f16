#include "bench/progress.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "core/timer.h"

namespace treespec::bench {

namespace {
std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t / 60 % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  }
  return buf;
}
}  // namespace

Progress::Progress(FILE* out, int64_t total) : out_(out), total_(std::max<int64_t>(1, total)), t0_(core::now_s()) {
  tty_ = out_ && isatty(fileno(out_));
}

void Progress::advance(int64_t n) {
  done_ = std::min(total_, done_ + n);
  draw(false);
}

void Progress::draw(bool force) {
  if (!out_) return;
  const double now = core::now_s();
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  const double elapsed = now - t0_;
  const double eta = done_ > 0 ? elapsed * (1.0 - frac) / frac : -1.0;
  if (tty_) {
    if (!force && now - last_draw_ < 0.1) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\rbench [%s] %3.0f%% %lld/%lld  elapsed %s  ETA %s ", bar.c_str(), 100.0 * frac,
                 static_cast<long long>(done_), static_cast<long long>(total_), fmt_duration(elapsed).c_str(),
                 fmt_duration(eta).c_str());
  } else {
    const int decile = static_cast<int>(frac * 10.0);
    if (!force && decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(out_, "bench: %3.0f%% (%lld/%lld sequences), elapsed %s, ETA %s\n", 100.0 * frac,
                 static_cast<long long>(done_), static_cast<long long>(total_), fmt_duration(elapsed).c_str(),
                 fmt_duration(eta).c_str());
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (!out_ || finished_) return;
  finished_ = true;
  if (tty_) {
    draw(true);
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace treespec::bench
