// OTLP/HTTP's JSON encoding of an ExportTraceServiceRequest (opentelemetry-proto, "JSON Protobuf
// Encoding"): trace and span ids as hex strings (not base64), enums as integers, 64-bit integers
// (times, intValue) as decimal strings, field names in lowerCamelCase.
#pragma once
#include <string>
#include <vector>

#include "telemetry/span.h"

namespace kvgate::telemetry {

// One resource (service.name = `service`, service.version) and one scope ("kvgate") with
// `spans`.
std::string encodeOtlpJson(const std::vector<SpanRecord>& spans, const std::string& service,
                           const std::string& version);

}  // namespace kvgate::telemetry
