// Incremental chunked-transfer-coding scanner (RFC 9112 §7.1).
//
// Feed bytes as they arrive; it reports how many belong to the message and when the last chunk
// and trailers are complete. The proxy relays the bytes unchanged (no decoding needed); the
// servers that must see the body pass `decoded` to collect the payload. Limits: chunk-size line
// (with extensions) at most 4 KiB, a trailer line at most 8 KiB and the whole trailer section
// at most 16 KiB (a peer cannot stream trailers forever), size at most 2^60.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvgate::http {

class ChunkedScanner {
 public:
  struct Step {
    size_t consumed = 0;  // bytes of the input that belong to the message
    bool done = false;    // the message ended within `consumed`
    bool error = false;
  };
  // Scans data[0, len). When `decoded` is non-null, payload bytes are appended to it.
  Step feed(const char* data, size_t len, std::string* decoded = nullptr);
  uint64_t payloadBytes() const { return payload_; }

 private:
  enum class State {
    kSize,
    kSizeLf,
    kExt,
    kData,
    kDataCr,
    kDataLf,
    kTrailerStart,
    kTrailer,
    kTrailerLf,
    kFinalLf,
    kDone
  };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  uint64_t payload_ = 0;
  size_t line_len_ = 0;
  int size_digits_ = 0;
  size_t trailer_total_ = 0;  // trailer bytes so far (bounded in total)
};

}  // namespace kvgate::http
