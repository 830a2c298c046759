// A bounded, allocation-free msgpack reader for untrusted bytes (engine KV events).
//
// Every read checks the bytes left before touching them; a declared length or element count that
// cannot fit in what remains is an error at once (each element takes at least one byte), so a
// hostile header ("array of 4 billion") costs nothing. skip() walks nested values iteratively,
// without recursion. After the first error the reader stays failed and every read returns false.
// Strings and binaries come back as views into the input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvgate::engines {

class MsgpackReader {
 public:
  enum class Type : uint8_t { kNil, kBool, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kEnd };

  MsgpackReader(const void* data, size_t size)
      : p_(static_cast<const uint8_t*>(data)), end_(p_ + size) {}

  bool ok() const { return ok_; }
  bool atEnd() const { return p_ == end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* position() const { return p_; }
  // The type of the next value (kEnd when no bytes are left or the reader failed).
  Type peek() const;

  bool readNil();  // consumes a nil; false (not an error) when the next value is not nil
  bool readArrayHeader(uint32_t& n);
  bool readMapHeader(uint32_t& n);
  // Integers: readUint accepts any integer encoding whose value is >= 0; readInt any value that
  // fits int64. A value of the wrong type or range fails the reader.
  bool readUint(uint64_t& v);
  bool readInt(int64_t& v);
  bool readFloat(double& v);  // float32 or float64 (integers too: timestamps are sometimes ints)
  bool readBool(bool& v);
  bool readStr(std::string_view& s);
  bool readBin(std::string_view& b);
  // Skips one complete value of any type, however deeply nested.
  bool skip();
  // Marks the reader failed (a caller found a value of the wrong shape).
  bool fail() {
    ok_ = false;
    return false;
  }

 private:
  bool take(size_t n, const uint8_t*& at);
  bool readBe(size_t n, uint64_t& v);
  bool readLength(uint8_t tag, uint32_t& n);  // the length after a str/bin/array/map/ext tag
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace kvgate::engines
