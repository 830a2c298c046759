// Zero-copy HTTP/1.1 head parser (request and response), strict against request smuggling.
//
// The head is parsed in place: every string_view points into the caller's buffer, nothing is
// copied or allocated. Framing rules enforced (RFC 9112 §6, §11.2; the cases nginx and HAProxy
// reject): Content-Length together with Transfer-Encoding, differing or malformed Content-Length,
// any Transfer-Encoding other than a final "chunked", obs-fold continuation lines, bare LF line
// ends, header names outside tchar, whitespace before the colon, control bytes in values, more
// than kMaxHeaders headers, and a missing or repeated Host on HTTP/1.1.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>

namespace kvgate::http {

constexpr size_t kMaxHeaders = 100;

struct Header {
  std::string_view name;
  std::string_view value;
};

enum class BodyKind : uint8_t { kNone, kLength, kChunked, kUntilClose };

struct ParseError {
  int status = 400;  // HTTP status to answer with (400, 431, 501, 505)
  const char* reason = "";
};

// Room for the headers of one head. The first kInlineHeaders live in the object, left
// uninitialised until the parser fills an entry; a head with more moves them all to a heap array
// of kMaxHeaders, which the object then keeps for its later heads (a client that sends many headers
// pays once per connection). Heads live in long-lived objects (one request and one response head
// per open connection), so this keeps memory per open stream small: 768 bytes per head instead
// of 3.2 KB, for the ~6 headers of an engine's response and the ~10-20 of an SDK's request.
// Assignment copies the entries and keeps the target's own heap array (`head = RequestHead{}`
// resets a head without freeing it).
class HeaderArray {
 public:
  static constexpr size_t kInlineHeaders = 24;
  HeaderArray() {}  // NOLINT: deliberately leaves inline_ uninitialised
  HeaderArray(const HeaderArray& o) { copyFrom(o); }
  HeaderArray& operator=(const HeaderArray& o) {
    if (this != &o) copyFrom(o);
    return *this;
  }
  Header& operator[](size_t i) { return data()[i]; }
  const Header& operator[](size_t i) const { return data()[i]; }
  // Sets entry i (entries are set in order: i <= count); i < kMaxHeaders.
  void set(size_t i, Header h) {
    if (i >= kInlineHeaders && !heap_) spill();
    new (data() + i) Header(h);
  }
  size_t count = 0;  // entries set (the parser keeps it equal to num_headers)

 private:
  Header* data() { return heap_ ? heap_.get() : std::launder(reinterpret_cast<Header*>(inline_)); }
  const Header* data() const {
    return heap_ ? heap_.get() : std::launder(reinterpret_cast<const Header*>(inline_));
  }
  void spill() {
    heap_.reset(new Header[kMaxHeaders]);
    std::memcpy(static_cast<void*>(heap_.get()), inline_, count * sizeof(Header));
  }
  void copyFrom(const HeaderArray& o) {
    count = 0;
    if (o.count > kInlineHeaders && !heap_) heap_.reset(new Header[kMaxHeaders]);
    std::memcpy(static_cast<void*>(data()), o.data(), o.count * sizeof(Header));
    count = o.count;
  }
  alignas(Header) unsigned char inline_[kInlineHeaders * sizeof(Header)];
  std::unique_ptr<Header[]> heap_;
};
static_assert(std::is_trivially_copyable_v<Header> && std::is_trivially_destructible_v<Header>);

struct HeadCommon {
  int version_minor = 1;
  HeaderArray headers;
  size_t num_headers = 0;
  size_t head_bytes = 0;  // bytes of the head including the blank line
  BodyKind body_kind = BodyKind::kNone;
  uint64_t content_length = 0;
  bool keep_alive = true;
  bool has_connection_header = false;
  // Bit (size & 63) set for each header name's size: a lookup of a name no header has the size
  // of (most lookups: X-Api-Key, X-Model, ... are usually absent) costs one test.
  uint64_t name_sizes = 0;

  // Case-insensitive lookup of the first header with this name; empty view when absent.
  std::string_view get(std::string_view name) const;
  bool has(std::string_view name) const;
};

struct RequestHead : HeadCommon {
  std::string_view method;
  std::string_view target;
  std::string_view host;  // Host header value (with port, if any)
  bool expect_continue = false;
};

struct ResponseHead : HeadCommon {
  int status = 0;
  std::string_view reason;
  bool event_stream = false;  // Content-Type: text/event-stream
};

// Returns >0: head complete, that many bytes consumed; 0: need more bytes; -1: error (err set).
// A head longer than max_head_bytes is an error (431) even when incomplete.
int parseRequestHead(const char* data, size_t len, size_t max_head_bytes, RequestHead& out,
                     ParseError& err);
// `request_method` decides HEAD handling; 1xx, 204 and 304 carry no body.
int parseResponseHead(const char* data, size_t len, size_t max_head_bytes,
                      std::string_view request_method, ResponseHead& out, ParseError& err);

bool iequalsSameSize(std::string_view a, std::string_view b);
// ASCII case-insensitive equality; inline so the common size mismatch costs one compare.
inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && iequalsSameSize(a, b);
}
// True when the comma-separated header value contains `token` (case-insensitive).
bool headerHasToken(std::string_view value, std::string_view token);
// True for headers a proxy must not forward (RFC 9110 §7.6.1 hop-by-hop set).
bool isHopByHop(std::string_view name);

}  // namespace kvgate::http
