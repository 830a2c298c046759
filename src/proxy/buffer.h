// A growable byte buffer with a read cursor, for the data plane's client and upstream bytes.
#pragma once
#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

#include "http/asio.h"

namespace kvgate::proxy {

// A growable byte buffer with a read cursor; views into it stay valid until the next prepare().
// Storage is not zero-filled, so an idle or streaming connection only holds the pages it used.
// Every allocation has kTailPad readable bytes past its capacity, so a JSON parser that reads
// ahead (simdjson's padding) can parse a body in place.
class Buffer {
 public:
  static constexpr size_t kTailPad = 64;
  // Readable bytes from `p` (a pointer into the buffer) to the end of the allocation.
  size_t readableFrom(const char* p) const {
    return static_cast<size_t>(buf_.get() + cap_ + kTailPad - p);
  }
  char* data() { return buf_.get() + start_; }
  const char* data() const { return buf_.get() + start_; }
  size_t size() const { return end_ - start_; }
  bool empty() const { return end_ == start_; }
  std::string_view view() const { return {data(), size()}; }
  void consume(size_t n) {
    start_ += n;
    if (start_ == end_) start_ = end_ = 0;
  }
  void clear() { start_ = end_ = 0; }  // keeps the allocation for the next message
  // Removes `n` bytes at offset `pos` from the unread data (the bytes after them move down).
  void erase(size_t pos, size_t n) {
    char* p = buf_.get() + start_ + pos;
    std::memmove(p, p + n, size() - pos - n);
    end_ -= n;
  }
  // Frees an empty buffer's allocation when it grew past `keep` bytes (one huge message must
  // not pin its size for the connection's life).
  void shrinkIfEmpty(size_t keep) {
    if (empty() && cap_ > keep) {
      buf_.reset();
      cap_ = start_ = end_ = 0;
    }
  }
  // Writable space of at least `n` bytes (may move the data: invalidates views).
  asio::mutable_buffer prepare(size_t n) {
    if (cap_ - end_ < n) {
      if (start_ > 0) {
        std::memmove(buf_.get(), buf_.get() + start_, end_ - start_);
        end_ -= start_;
        start_ = 0;
      }
      if (cap_ - end_ < n) {
        size_t cap = std::max(end_ + n, cap_ * 2);
        std::unique_ptr<char[]> next(new char[cap + kTailPad]);
        if (end_ > 0) std::memcpy(next.get(), buf_.get(), end_);
        buf_ = std::move(next);
        cap_ = cap;
      }
    }
    return asio::buffer(buf_.get() + end_, cap_ - end_);
  }
  void commit(size_t n) { end_ += n; }
  void append(const char* p, size_t n) {
    prepare(n);
    std::memcpy(buf_.get() + end_, p, n);
    end_ += n;
  }

 private:
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0, start_ = 0, end_ = 0;
};

}  // namespace kvgate::proxy
