// A msgpack writer with msgspec's encoding choices (engines.md §1.5): integers in the shortest
// form, float64 always, str/bin/array/map headers by size.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kvgate::engines {

class MsgpackWriter {
 public:
  std::string& out() { return b_; }
  void nil() { byte(0xc0); }
  void boolean(bool v) { byte(v ? 0xc3 : 0xc2); }
  void f64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    byte(0xcb);
    be(bits, 8);
  }
  void uint(uint64_t v) {
    if (v < 128) {
      byte(static_cast<uint8_t>(v));
    } else if (v <= 0xff) {
      byte(0xcc);
      be(v, 1);
    } else if (v <= 0xffff) {
      byte(0xcd);
      be(v, 2);
    } else if (v <= 0xffffffffULL) {
      byte(0xce);
      be(v, 4);
    } else {
      byte(0xcf);
      be(v, 8);
    }
  }
  void sint(int64_t v) {
    if (v >= 0) return uint(static_cast<uint64_t>(v));
    if (v >= -32) return byte(static_cast<uint8_t>(v));
    if (v >= INT8_MIN) return byte(0xd0), be(static_cast<uint64_t>(v), 1);
    if (v >= INT16_MIN) return byte(0xd1), be(static_cast<uint64_t>(v), 2);
    if (v >= INT32_MIN) return byte(0xd2), be(static_cast<uint64_t>(v), 4);
    byte(0xd3);
    be(static_cast<uint64_t>(v), 8);
  }
  void str(std::string_view s) {
    if (s.size() < 32) {
      byte(static_cast<uint8_t>(0xa0 | s.size()));
    } else if (s.size() <= 0xff) {
      byte(0xd9);
      be(s.size(), 1);
    } else if (s.size() <= 0xffff) {
      byte(0xda);
      be(s.size(), 2);
    } else {
      byte(0xdb);
      be(s.size(), 4);
    }
    b_.append(s);
  }
  void bin(std::string_view s) {
    if (s.size() <= 0xff) {
      byte(0xc4);
      be(s.size(), 1);
    } else if (s.size() <= 0xffff) {
      byte(0xc5);
      be(s.size(), 2);
    } else {
      byte(0xc6);
      be(s.size(), 4);
    }
    b_.append(s);
  }
  void array(uint32_t n) { header(n, 0x90, 0xdc); }
  void map(uint32_t n) { header(n, 0x80, 0xde); }

 private:
  void header(uint32_t n, uint8_t fix, uint8_t wide16) {
    if (n < 16) {
      byte(static_cast<uint8_t>(fix | n));
    } else if (n <= 0xffff) {
      byte(wide16);
      be(n, 2);
    } else {
      byte(static_cast<uint8_t>(wide16 + 1));
      be(n, 4);
    }
  }
  void byte(uint8_t v) { b_.push_back(static_cast<char>(v)); }
  void be(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string b_;
};

}  // namespace kvgate::engines
