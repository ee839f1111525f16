#include "server_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/test_util.h"

namespace treespec::test {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

ServerProcess::ServerProcess(const std::string& model, const std::vector<std::string>& args, bool wait_ready) {
  log_path_ = temp_dir() + "/server.log";
  std::vector<std::string> argv = {treespec_binary(), "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot create " + log_path_);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test process
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (pid_ < 0) throw std::runtime_error("fork failed");

  const std::regex re("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const double deadline = now_s() + 60.0;
  while (now_s() < deadline) {
    std::smatch m;
    const std::string text = log();
    if (std::regex_search(text, m, re)) {
      port_ = std::stoi(m[1]);
      break;
    }
    if (!running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (port_ == 0) {
    const std::string text = log();
    kill_child();
    throw std::runtime_error("server did not start listening; log:\n" + text);
  }
  if (wait_ready && !wait_healthy(60.0)) throw std::runtime_error("server did not become healthy; log:\n" + log());
}

ServerProcess::~ServerProcess() { kill_child(); }

// Only ever signals our own child: pid_ is set to -1 once it has been reaped, and
// kill(-1, ...) would signal every process we may signal.
void ServerProcess::kill_child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

bool ServerProcess::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int ServerProcess::stop(int sig, double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  const double deadline = now_s() + timeout_s;
  while (now_s() < deadline) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;  // the destructor kills it
}

bool ServerProcess::wait_healthy(double timeout_s) {
  const double deadline = now_s() + timeout_s;
  auto c = client(5.0);
  while (now_s() < deadline) {
    if (auto r = c.Get("/health"); r && r->status == 200) return true;
    if (!running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

httplib::Client ServerProcess::client(double read_timeout_s) const {
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(5, 0);
  const auto us = static_cast<int64_t>(read_timeout_s * 1e6);
  c.set_read_timeout(us / 1000000, us % 1000000);
  c.set_write_timeout(10, 0);
  return c;
}

std::string ServerProcess::log() const { return read_file(log_path_); }

nlohmann::json HttpReply::json() const {
  auto j = nlohmann::json::parse(body, nullptr, false);
  return j;
}

HttpReply post_json(httplib::Client& c, const std::string& path, const std::string& body, const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  HttpReply out;
  if (auto r = c.Post(path.c_str(), h, body, "application/json")) {
    out.status = r->status;
    out.body = r->body;
    out.headers = r->headers;
  }
  return out;
}

HttpReply get(httplib::Client& c, const std::string& path, const std::string& key) {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  HttpReply out;
  if (auto r = c.Get(path.c_str(), h)) {
    out.status = r->status;
    out.body = r->body;
    out.headers = r->headers;
  }
  return out;
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

namespace {
// A series line without its model_name label (the server puts one on every series; the
// tests name series without it): `x{model_name="m",le="1"} 3` -> `x{le="1"} 3`,
// `x{model_name="m"} 3` -> `x 3`.
std::string without_model_name(const std::string& line) {
  const auto p = line.find("model_name=\"");
  if (p == std::string::npos) return line;
  const auto q = line.find('"', p + 12);
  if (q == std::string::npos) return line;
  std::string out = line.substr(0, p);
  size_t end = q + 1;
  if (end < line.size() && line[end] == ',') {
    ++end;
  } else if (!out.empty() && out.back() == '{' && end < line.size() && line[end] == '}') {
    out.pop_back();
    ++end;
  }
  return out + line.substr(end);
}
}  // namespace

double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string raw;
  while (std::getline(in, raw)) {
    const std::string line = without_model_name(raw);
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1.0;
}

double wait_metric(ServerProcess& s, const std::string& series, const std::function<bool(double)>& pred,
                   double timeout_s) {
  auto c = s.client(5.0);
  const double deadline = now_s() + timeout_s;
  double v = -1.0;
  for (;;) {
    v = metric(get(c, "/metrics").body, series);
    if (pred(v) || now_s() > deadline) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace treespec::test
