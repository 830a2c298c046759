#include "http/chunked.h"

#include <algorithm>

#include "common/hex.h"

namespace kvgate::http {
namespace {
constexpr size_t kMaxSizeLine = 4096;
constexpr size_t kMaxTrailer = 8192;        // one trailer line
constexpr size_t kMaxTrailerTotal = 16384;  // the whole trailer section
}  // namespace

ChunkedScanner::Step ChunkedScanner::feed(const char* data, size_t len, std::string* decoded) {
  Step s;
  size_t i = 0;
  auto error = [&]() {
    s.consumed = i;
    s.error = true;
    return s;
  };
  while (i < len && state_ != State::kDone) {
    char c = data[i];
    switch (state_) {
      case State::kSize: {
        int h = hexDigitValue(c);
        if (h >= 0) {
          if (++size_digits_ > 15) return error();
          remaining_ = remaining_ * 16 + static_cast<uint64_t>(h);
          ++line_len_;
          ++i;
        } else if (size_digits_ == 0) {
          return error();
        } else if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else if (c == ';' || c == ' ' || c == '\t') {
          state_ = State::kExt;
          ++i;
        } else {
          return error();
        }
        break;
      }
      case State::kExt:
        if (c == '\r')
          state_ = State::kSizeLf;
        else if (c == '\n' || ++line_len_ > kMaxSizeLine)
          return error();
        ++i;
        break;
      case State::kSizeLf:
        if (c != '\n') return error();
        ++i;
        size_digits_ = 0;
        line_len_ = 0;
        state_ = remaining_ == 0 ? State::kTrailerStart : State::kData;
        break;
      case State::kData: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, len - i));
        if (decoded) decoded->append(data + i, n);
        payload_ += n;
        remaining_ -= n;
        i += n;
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c != '\r') return error();
        ++i;
        state_ = State::kDataLf;
        break;
      case State::kDataLf:
        if (c != '\n') return error();
        ++i;
        state_ = State::kSize;
        break;
      case State::kTrailerStart:
        if (c == '\r') {
          state_ = State::kFinalLf;
        } else {
          state_ = State::kTrailer;
          line_len_ = 1;
          if (++trailer_total_ > kMaxTrailerTotal) return error();
        }
        ++i;
        break;
      case State::kTrailer:
        if (c == '\r')
          state_ = State::kTrailerLf;
        else if (c == '\n' || ++line_len_ > kMaxTrailer || ++trailer_total_ > kMaxTrailerTotal)
          return error();
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return error();
        ++i;
        state_ = State::kTrailerStart;
        break;
      case State::kFinalLf:
        if (c != '\n') return error();
        ++i;
        state_ = State::kDone;
        break;
      case State::kDone:
        break;
    }
  }
  s.consumed = i;
  s.done = state_ == State::kDone;
  return s;
}

}  // namespace kvgate::http
