// posenc serve: the explorer page and its JSON API over HTTP, for a browser on this machine.
// Routes: / (the page, embedded in the binary), /chart.js (Debian's Chart.js, read once at
// start), /api/<endpoint> (serve/explorer_api.h). Nothing is read from a path a request names.
//
// The HTTP server is GNU libmicrohttpd, event-driven: a few threads each poll many connections
// (epoll), so an idle or slow client holds a socket and a bounded buffer, never a thread that
// other clients wait for. The limits below and why: docs/SECURITY.md, "The explorer's server".
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "numbers.h"
#include "posenc/error.h"
#include "serve/explorer_api.h"
#include "serve/text.h"

namespace posenc::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxBodyBytes = size_t{1} << 20;       // request bodies, however framed: 1 MiB
constexpr size_t kMaxDroppedBytes = size_t{16} << 20;   // a longer body closes the connection
constexpr size_t kMaxResponseBytes = size_t{16} << 20;  // answers: 16 MiB
constexpr unsigned kThreads = 4;                        // each polls its share of connections
constexpr unsigned kMaxConnections = 512;               // open at once; more are refused
constexpr unsigned kIdleSeconds = 10;                   // a connection silent this long is closed
constexpr size_t kConnectionMemory = 64 << 10;          // per connection: request line + headers

std::string ReadChartJs() {
  std::ifstream in(POSENC_CHART_JS, std::ios::binary);
  Require(static_cast<bool>(in), "serve", "chart.js",
          "be installed (Debian's libjs-chart.js, which scripts/setup.sh installs)",
          POSENC_CHART_JS);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// What the server answers from: the page and Chart.js, both kept for the whole run.
struct Site {
  std::string_view page;
  std::string chart_js;
};

// One request while it is read: its body so far and its query parameters.
struct Request {
  std::string body;     // at most kMaxBodyBytes of it
  size_t received = 0;  // bytes of body that arrived
  serve::Query query;
  std::string repeated;  // a parameter named twice, if any
};

MHD_Result Send(MHD_Connection* connection, unsigned status, std::string_view content,
                const char* type, MHD_ResponseMemoryMode memory = MHD_RESPMEM_MUST_COPY,
                const char* allow = nullptr) {
  MHD_Response* response =
      MHD_create_response_from_buffer(content.size(), const_cast<char*>(content.data()), memory);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// A JSON answer. Strings that are not UTF-8 are replaced rather than thrown on, so that no text
// in an answer can turn it into a 500.
MHD_Result SendJson(MHD_Connection* connection, unsigned status, const json& body,
                    const char* allow = nullptr) {
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxResponseBytes) {
    status = 500;
    text = json{{"error", "[serve] response must be at most 16 MiB, got " +
                              std::to_string(text.size()) + " bytes"}}
               .dump();
  }
  return Send(connection, status, text, "application/json", MHD_RESPMEM_MUST_COPY, allow);
}

MHD_Result SendError(MHD_Connection* connection, unsigned status, const std::string& message,
                     const char* allow = nullptr) {
  return SendJson(connection, status, {{"error", "[serve] " + message}}, allow);
}

MHD_Result CollectParameter(void* cls, MHD_ValueKind, const char* key, size_t key_size,
                            const char* value, size_t value_size) {
  auto* request = static_cast<Request*>(cls);
  std::string name(key, key_size);
  const bool added =
      request->query.emplace(name, value == nullptr ? "" : std::string(value, value_size)).second;
  if (!added && request->repeated.empty()) request->repeated = std::move(name);
  return MHD_YES;
}

MHD_Result AnswerApi(MHD_Connection* connection, const std::string& endpoint, Request& request,
                     bool posted) {
  if (!request.repeated.empty()) {
    return SendError(
        connection, 400,
        "query must name each parameter once, got " + serve::Quoted(request.repeated) + " twice");
  }
  try {
    return SendJson(
        connection, 200,
        serve::Answer(endpoint, request.query,
                      posted ? std::optional<std::string_view>(request.body) : std::nullopt));
  } catch (const Error& e) {
    return SendJson(connection, 400, {{"error", e.what()}});
  } catch (const std::exception& e) {
    return SendError(connection, 500, std::string("internal error: ") + e.what());
  }
}

bool IsEndpointName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(),
                                      [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

// Called by libmicrohttpd once the headers are in (*state still null), once per piece of the
// body (decoded from chunks when chunked), and once more when the request is complete.
MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url_text,
                  const char* method_text, const char*, const char* upload_data,
                  size_t* upload_data_size, void** state) {
  const Site& site = *static_cast<const Site*>(cls);
  const std::string_view url = url_text, method = method_text;
  const bool api = url.starts_with("/api/");
  const bool read = method == "GET" || method == "HEAD";
  auto* request = static_cast<Request*>(*state);
  if (request == nullptr) {
    // The headers are in; nothing of a body is read yet. Refuse here what needs no body.
    *state = request = new Request;
    if (!read && !(api && method == "POST")) {
      return SendError(
          connection, 405,
          "method must be GET or HEAD (POST for /api/<endpoint>), got " + serve::Quoted(method),
          api ? "GET, HEAD, POST" : "GET, HEAD");
    }
    const char* length =
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    // A body declared longer than would be read and dropped is refused before it is sent (the
    // client may see the connection close while it sends); a shorter one is read (below), so
    // that the client reads the 413.
    if (length != nullptr && std::strtoull(length, nullptr, 10) > kMaxDroppedBytes) {
      return SendError(connection, 413, "request body must be at most 1 MiB");
    }
    return MHD_YES;
  }
  if (*upload_data_size > 0) {
    // However the body is framed (Content-Length or chunked), it is counted as it arrives and
    // kept only up to the limit. libmicrohttpd 0.9.75 answers only once the body has ended, so
    // the rest is read and dropped, and a body that goes on past kMaxDroppedBytes closes the
    // connection unanswered: memory stays bounded either way.
    request->received += *upload_data_size;
    if (request->received > kMaxDroppedBytes) return MHD_NO;
    if (request->received <= kMaxBodyBytes) request->body.append(upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (request->received > kMaxBodyBytes) {
    return SendError(connection, 413, "request body must be at most 1 MiB");
  }
  const bool posted = method == "POST";
  if (api) {
    const std::string endpoint(url.substr(5));
    if (IsEndpointName(endpoint)) {
      // A form-encoded body would be read as parameters by some servers: bodies are JSON only.
      const char* type =
          MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
      if ((posted || !request->body.empty()) &&
          (type == nullptr || !std::string_view(type).starts_with("application/json"))) {
        return SendError(connection, 415, "body must be sent as application/json (a config.json)");
      }
      MHD_get_connection_values_n(connection, MHD_GET_ARGUMENT_KIND, &CollectParameter, request);
      return AnswerApi(connection, endpoint, *request, posted || !request->body.empty());
    }
  } else if (posted) {
    return SendError(connection, 405, "method must be GET or HEAD for " + serve::Quoted(url),
                     "GET, HEAD");
  } else if (url == "/") {
    return Send(connection, 200, site.page, "text/html; charset=utf-8", MHD_RESPMEM_PERSISTENT);
  } else if (url == "/chart.js") {
    return Send(connection, 200, site.chart_js, "text/javascript", MHD_RESPMEM_PERSISTENT);
  }
  return SendError(connection, 404,
                   "path must be /, /chart.js or /api/<endpoint>, got " + serve::Quoted(url));
}

void Forget(void*, MHD_Connection*, void** state, MHD_RequestTerminationCode) {
  delete static_cast<Request*>(*state);
  *state = nullptr;
}

// Query values as forms send them: '+' is a space, then %XX escapes (libmicrohttpd's own
// unescaping leaves '+' as it is).
size_t Unescape(void*, MHD_Connection*, char* text) {
  std::replace(text, text + std::strlen(text), '+', ' ');
  return MHD_http_unescape(text);
}

// A listening socket on host:port (port 0: any free one), and the port it got.
int Listen(const std::string& host, int port, int& bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  Require(error == 0 && found != nullptr, "serve", "host", "be an address of this machine",
          serve::Quoted(host));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const bool ok =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
  const std::string why = std::strerror(errno);
  if (!ok && fd >= 0) close(fd);
  Require(ok, "serve", "port", "be free to listen on at " + host + " (" + why + ")", port);
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  bound = ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  return fd;
}

// Serves until SIGINT or SIGTERM. The signals are blocked before any thread starts (so every
// thread inherits the mask) and this thread waits for them: a signal sent at any moment after
// that, even before the server runs, is pending until sigwait takes it. Nothing runs inside a
// signal handler.
void Serve(const std::string& host, int port) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that goes away is an error on its socket, not an exit

  Site site{serve::Embedded("explorer.html"), ReadChartJs()};
  int bound = 0;
  const int fd = Listen(host, port, bound);
  MHD_Daemon* daemon =
      MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, nullptr, nullptr, &Handle, &site,
                       MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_THREAD_POOL_SIZE, kThreads,
                       MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_CONNECTION_TIMEOUT,
                       kIdleSeconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory,
                       MHD_OPTION_NOTIFY_COMPLETED, &Forget, nullptr, MHD_OPTION_UNESCAPE_CALLBACK,
                       &Unescape, nullptr, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, MHD_OPTION_END);
  if (daemon == nullptr) close(fd);
  Require(daemon != nullptr, "serve", "server", "start (libmicrohttpd)", host);
  std::cout << "posenc serve: http://"
            << (host.find(':') != std::string::npos ? "[" + host + "]" : host) << ":" << bound
            << "/  (Ctrl-C stops)\n"
            << std::flush;  // whoever started the server waits for this line
  int signal = 0;
  sigwait(&stop_signals, &signal);
  MHD_stop_daemon(daemon);
  close(fd);
  std::cout << "posenc serve: stopped\n" << std::flush;
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
      ->transform(DecimalInteger(0, 65535))
      ->capture_default_str();
  serve->callback([] { Serve(host, port); });
}

}  // namespace posenc::cli
