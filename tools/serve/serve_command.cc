// posenc serve: the explorer page and its JSON API over HTTP (cpp-httplib), for a browser on
// this machine. Routes: / (the page, embedded in the binary), /chart.js (Debian's Chart.js, read
// once at start), /api/<endpoint> (serve/explorer_api.h). Nothing is read from a path a request
// names.
#include <httplib.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "commands.h"
#include "posenc/error.h"
#include "serve/explorer_api.h"

namespace posenc::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxBodyBytes = size_t{1} << 20;       // request bodies: 1 MiB
constexpr size_t kMaxResponseBytes = size_t{16} << 20;  // answers: 16 MiB

std::string ReadChartJs() {
  std::ifstream in(POSENC_CHART_JS, std::ios::binary);
  Require(static_cast<bool>(in), "serve", "chart.js",
          "be installed (Debian's libjs-chart.js, which scripts/setup.sh installs)",
          POSENC_CHART_JS);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void SendJson(httplib::Response& res, int status, const json& body) {
  std::string text = body.dump();
  if (text.size() > kMaxResponseBytes) {
    status = 500;
    text = json{{"error", "[serve] response must be at most 16 MiB, got " +
                              std::to_string(text.size()) + " bytes"}}
               .dump();
  }
  res.status = status;
  res.set_content(text, "application/json");
}

void AnswerApi(const httplib::Request& req, httplib::Response& res) {
  // A form-encoded body would be mixed into the query parameters: bodies are JSON only.
  if (req.method == "POST" &&
      !req.get_header_value("Content-Type").starts_with("application/json")) {
    SendJson(res, 415,
             {{"error", "[serve] body must be sent as application/json (a config.json)"}});
    return;
  }
  serve::Query query;
  for (const auto& [name, value] : req.params) {
    if (!query.emplace(name, value).second) {
      SendJson(res, 400,
               {{"error", "[serve] query must name each parameter once, got '" +
                              name.substr(0, 40) + "' twice"}});
      return;
    }
  }
  try {
    SendJson(res, 200, serve::Answer(req.matches[1], query, req.body));
  } catch (const Error& e) {
    SendJson(res, 400, {{"error", e.what()}});
  }
}

// Serves until SIGINT or SIGTERM. The signals are blocked in every thread and taken by one
// waiting thread, which stops the server: nothing runs inside a signal handler.
void Serve(const std::string& host, int port) {
  const std::string chart_js = ReadChartJs();
  httplib::Server server;
  server.set_payload_max_length(kMaxBodyBytes);
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = serve::Embedded("explorer.html");
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  server.Get("/chart.js", [&chart_js](const httplib::Request&, httplib::Response& res) {
    res.set_content(chart_js, "text/javascript");
  });
  server.Get(R"(/api/([a-z_]+))", AnswerApi);
  server.Post(R"(/api/([a-z_]+))", AnswerApi);  // a config.json to stretch, at most 1 MiB
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 413) {
      SendJson(res, 413, {{"error", "[serve] request body must be at most 1 MiB"}});
    } else if (res.status == 404) {
      SendJson(res, 404, {{"error", "[serve] path must be /, /chart.js or /api/<endpoint>"}});
    } else if (res.body.empty()) {
      SendJson(res, res.status, {{"error", "[serve] bad request"}});
    }
    (void)req;
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendJson(res, 500, {{"error", "[serve] internal error: " + what}});
      });

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // inherited by the server's threads

  const int bound = port == 0                         ? server.bind_to_any_port(host)
                    : server.bind_to_port(host, port) ? port
                                                      : -1;
  Require(bound > 0, "serve", "port", "be free to listen on at " + host, port);
  std::thread stopper([&server, &stop_signals] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  std::cout << "posenc serve: http://"
            << (host.find(':') != std::string::npos ? "[" + host + "]" : host) << ":" << bound
            << "/  (Ctrl-C stops)" << std::endl;
  server.listen_after_bind();
  // listen_after_bind also returns when the socket fails; wake the stopper either way.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  std::cout << "posenc serve: stopped" << std::endl;
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto* serve = app.add_subcommand(
      "serve", "The explorer: a page to try every scheme in a browser, and its JSON API");
  static std::string host = "127.0.0.1";
  static int port = 8040;
  serve->add_option("--host", host, "Address to listen on (other machines reach it only if set)")
      ->capture_default_str();
  serve->add_option("--port", port, "Port (0: any free port, printed on start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->callback([] { Serve(host, port); });
}

}  // namespace posenc::cli
