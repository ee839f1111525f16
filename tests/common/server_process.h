// Runs `treespec serve` as a child process for integration tests: on 127.0.0.1, on a
// port the server picks itself (--port 0, read back from its log), killed by the
// destructor whatever happens in the test (and by the kernel if the test process dies).
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace treespec::test {

class ServerProcess {
 public:
  // Starts the server with `args` after `serve -m model --port 0`; waits until it listens.
  ServerProcess(const std::string& model, const std::vector<std::string>& args, bool wait_ready = true);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  int pid() const { return pid_; }  // -1 once it has exited
  bool wait_healthy(double timeout_s);
  httplib::Client client(double read_timeout_s = 60.0) const;
  // Sends a signal and waits for the exit; returns the exit code (-1 on timeout or a
  // signal death).
  int stop(int sig, double timeout_s);
  bool running();
  std::string log() const;

 private:
  void kill_child();
  int pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// POST with a JSON body (and optional API key); never throws.
struct HttpReply {
  int status = -1;  // -1: no response
  std::string body;
  httplib::Headers headers;
  nlohmann::json json() const;
  // A response header's value ("" when absent).
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};
HttpReply post_json(httplib::Client& c, const std::string& path, const std::string& body, const std::string& key = {});
HttpReply get(httplib::Client& c, const std::string& path, const std::string& key = {});

// Splits an SSE body into its `data:` payloads.
std::vector<std::string> sse_events(const std::string& body);

// A numeric value from Prometheus text (exact series name incl. labels, without the
// model_name label every series carries); -1 if absent.
double metric(const std::string& text, const std::string& series);

// Polls the server's /metrics until `pred(value of series)` holds or the timeout passes;
// returns the last value. Metrics are updated just after responses are sent, so a
// client can read them a moment before they move.
double wait_metric(ServerProcess& s, const std::string& series, const std::function<bool(double)>& pred,
                   double timeout_s = 10.0);

}  // namespace treespec::test
