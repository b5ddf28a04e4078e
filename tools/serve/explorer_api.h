// The JSON API of `posenc serve`: every number the explorer page draws, computed by the posenc
// library. Each endpoint is a pure function of its query parameters, so that it is tested without
// a server; the HTTP layer (serve_command.cc) only routes, caps sizes and turns errors into 400s.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace posenc::serve {

// Query parameters by name (one value each; the HTTP layer refuses repeated names).
using Query = std::map<std::string, std::string>;

// The endpoints, in the order the page's panels use them: "waves", "similarity", "order",
// "rope", "stretch", "alibi", "checks".
const std::vector<std::string>& Endpoints();

// Answers /api/<endpoint>?<query> with the request's body (none for a GET; only "stretch" reads
// one: a config.json, which must then be UTF-8 and not empty). Throws posenc::Error naming the
// parameter, the rule and the value for bad input (a name or value that is not UTF-8, an unknown
// parameter and a body where none is read included), and for an unknown endpoint.
nlohmann::json Answer(const std::string& endpoint, const Query& query,
                      std::optional<std::string_view> body = std::nullopt);

// The embedded file of that name (serve/embedded_files.h); throws posenc::Error when none is.
std::string_view Embedded(std::string_view name);

}  // namespace posenc::serve
