// Checks on who sends an API request, made before any handler runs. A browser lets any web
// page send requests to 127.0.0.1 (cross-site request forgery), and a name the attacker
// controls can be re-pointed at 127.0.0.1 (DNS rebinding); the headers a browser sets itself
// (Host, Origin, Content-Type) tell those requests apart from the dashboard's own.
#pragma once

#include <httplib.h>

#include <optional>

#include "server/api_error.h"

namespace bks::server {

// Why `req` (an /api/ request) is refused, as ApiError 403 naming the header at fault, or
// nothing when it may go on. The served port is the one the request arrived at.
//  - Without a token (loopback only): Host, and Origin when sent, must be a loopback name
//    (localhost, 127.0.0.1, [::1]) with the served port.
//  - With a token, which already protects every call: a state-changing method (anything but
//    GET, HEAD, OPTIONS) with an Origin other than the Host it was sent to is refused.
std::optional<ApiError> cross_site_refusal(const httplib::Request& req, bool has_token);

// ApiError 415 (field "Content-Type") unless the body is declared as JSON. Browsers send
// text/plain or forms across sites without asking first, application/json never.
void require_json_content_type(const httplib::Request& req);

}  // namespace bks::server
