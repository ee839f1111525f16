#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "core/timer.h"

namespace treespec::core {

ProgressBar::ProgressBar(std::FILE* out) : out_(out), tty_(out != nullptr && isatty(fileno(out)) != 0) {}

std::string ProgressBar::duration(double s) {
  if (!(s >= 0.0) || s > 1e7) return "--:--";
  const auto t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

void ProgressBar::show(std::string_view phase, int64_t done, int64_t total, double elapsed_s, double eta_s,
                       std::string_view detail) {
  if (out_ == nullptr) return;
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0.0;
  const int decile = static_cast<int>(frac * 10.0);
  const bool new_phase = phase != phase_;
  const double now = now_s();
  if (!new_phase && !tty_ && decile == decile_) return;
  if (new_phase && tty_ && drawn_) std::fputc('\n', out_);
  if (new_phase) drawn_ = false;
  phase_ = phase;
  decile_ = decile;
  constexpr int kWidth = 24;
  const int fill = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - fill - 1), ' ');
  line_ = fmt::format("{:<8} [{}] {:3.0f}% {}/{}{}  elapsed {}  ETA {}", phase, bar, frac * 100.0, done, total, detail,
                      duration(elapsed_s), duration(eta_s));
  if (tty_ && !new_phase && done < total && now - last_draw_ < 0.1) return;  // throttled; finish() shows it
  last_draw_ = now;
  draw();
}

void ProgressBar::draw() {
  std::fprintf(out_, tty_ ? "\r%s\x1b[K" : "%s\n", line_.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (out_ == nullptr || !tty_ || line_.empty()) return;
  draw();
  std::fputc('\n', out_);
  std::fflush(out_);
  line_.clear();
  phase_.clear();
  drawn_ = false;
}

ProgressCounter::ProgressCounter(std::FILE* out, std::string phase, int64_t total, const std::string& unit)
    : bar_(out),
      phase_(std::move(phase)),
      detail_(unit.empty() ? "" : " " + unit),
      total_(std::max<int64_t>(1, total)),
      t0_(now_s()) {}

void ProgressCounter::advance(int64_t n) {
  done_ = std::min(total_, done_ + n);
  const double elapsed = now_s() - t0_;
  const double eta = done_ > 0 ? elapsed * static_cast<double>(total_ - done_) / static_cast<double>(done_) : -1.0;
  bar_.show(phase_, done_, total_, elapsed, eta, detail_);
}

}  // namespace treespec::core
