// The TLS fields of a rule's serviceArguments, validated: `mtls_frontend`, `tls_versions`,
// `tls_ciphers`, `alpn_protocols`, `mtls_backend` (http/tls_options.h says what they mean). Only the shape is
// checked here; the files are loaded when the data plane applies the rule (a CA bundle or CRL that
// does not load is a 400 there, and nothing changes).
#pragma once
#include <nlohmann/json.hpp>

#include "common/result.h"
#include "http/tls_options.h"

namespace kvgate::config {

Result<http::ServerTlsOptions> parseServerTls(const nlohmann::json& service_args, int security);
// `mtls_backend` (TLS to the engines: security 2 only).
Result<http::ClientTlsOptions> parseBackendTls(const nlohmann::json& service_args, int security);

}  // namespace kvgate::config
