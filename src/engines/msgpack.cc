#include "engines/msgpack.h"

#include <cstring>

namespace kvgate::engines {

bool MsgpackReader::take(size_t n, const uint8_t*& at) {
  if (!ok_ || remaining() < n) return fail();
  at = p_;
  p_ += n;
  return true;
}

bool MsgpackReader::readBe(size_t n, uint64_t& v) {
  const uint8_t* at;
  if (!take(n, at)) return false;
  v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | at[i];
  return true;
}

MsgpackReader::Type MsgpackReader::peek() const {
  if (!ok_ || p_ == end_) return Type::kEnd;
  const uint8_t t = *p_;
  if (t <= 0x7f || t >= 0xe0) return Type::kInt;
  if (t <= 0x8f) return Type::kMap;
  if (t <= 0x9f) return Type::kArray;
  if (t <= 0xbf) return Type::kStr;
  switch (t) {
    case 0xc0:
      return Type::kNil;
    case 0xc2:
    case 0xc3:
      return Type::kBool;
    case 0xc4:
    case 0xc5:
    case 0xc6:
      return Type::kBin;
    case 0xc7:
    case 0xc8:
    case 0xc9:
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
      return Type::kExt;
    case 0xca:
    case 0xcb:
      return Type::kFloat;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3:
      return Type::kInt;
    case 0xd9:
    case 0xda:
    case 0xdb:
      return Type::kStr;
    case 0xdc:
    case 0xdd:
      return Type::kArray;
    case 0xde:
    case 0xdf:
      return Type::kMap;
    default:
      return Type::kEnd;  // 0xc1: never used
  }
}

bool MsgpackReader::readNil() {
  if (peek() != Type::kNil) return false;
  ++p_;
  return true;
}

bool MsgpackReader::readLength(uint8_t tag, uint32_t& n) {
  uint64_t v = 0;
  bool ok;
  switch (tag) {
    case 0xc4:
    case 0xc7:
    case 0xd9:
      ok = readBe(1, v);
      break;
    case 0xc5:
    case 0xc8:
    case 0xda:
    case 0xdc:
    case 0xde:
      ok = readBe(2, v);
      break;
    default:  // 0xc6, 0xc9, 0xdb, 0xdd, 0xdf
      ok = readBe(4, v);
  }
  n = static_cast<uint32_t>(v);
  return ok;
}

bool MsgpackReader::readArrayHeader(uint32_t& n) {
  if (peek() != Type::kArray) return fail();
  const uint8_t t = *p_++;
  if (t <= 0x9f) {
    n = t & 0x0f;
  } else if (!readLength(t, n)) {
    return false;
  }
  return n <= remaining() || fail();  // every element takes at least one byte
}

bool MsgpackReader::readMapHeader(uint32_t& n) {
  if (peek() != Type::kMap) return fail();
  const uint8_t t = *p_++;
  if (t <= 0x8f) {
    n = t & 0x0f;
  } else if (!readLength(t, n)) {
    return false;
  }
  return uint64_t{n} * 2 <= remaining() || fail();
}

bool MsgpackReader::readUint(uint64_t& v) {
  int64_t s;
  if (peek() != Type::kInt) return fail();
  const uint8_t t = *p_;
  if (t <= 0x7f) {
    v = t;
    ++p_;
    return true;
  }
  if (t >= 0xcc && t <= 0xcf) {
    ++p_;
    return readBe(size_t{1} << (t - 0xcc), v);
  }
  if (!readInt(s)) return false;
  if (s < 0) return fail();
  v = static_cast<uint64_t>(s);
  return true;
}

bool MsgpackReader::readInt(int64_t& v) {
  if (peek() != Type::kInt) return fail();
  const uint8_t t = *p_++;
  if (t <= 0x7f) {
    v = t;
    return true;
  }
  if (t >= 0xe0) {
    v = static_cast<int8_t>(t);
    return true;
  }
  uint64_t u;
  if (t >= 0xcc && t <= 0xcf) {
    if (!readBe(size_t{1} << (t - 0xcc), u)) return false;
    if (u > static_cast<uint64_t>(INT64_MAX)) return fail();
    v = static_cast<int64_t>(u);
    return true;
  }
  const size_t width = size_t{1} << (t - 0xd0);  // d0..d3: 1, 2, 4, 8 bytes
  if (!readBe(width, u)) return false;
  if (width < 8) {  // sign-extend
    const uint64_t sign = uint64_t{1} << (width * 8 - 1);
    u = (u ^ sign) - sign;
  }
  v = static_cast<int64_t>(u);
  return true;
}

bool MsgpackReader::readFloat(double& v) {
  const Type ty = peek();
  if (ty == Type::kInt) {
    int64_t i;
    if (!readInt(i)) return false;
    v = static_cast<double>(i);
    return true;
  }
  if (ty != Type::kFloat) return fail();
  const uint8_t t = *p_++;
  uint64_t bits;
  if (t == 0xca) {
    if (!readBe(4, bits)) return false;
    uint32_t b32 = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b32, sizeof f);
    v = f;
  } else {
    if (!readBe(8, bits)) return false;
    std::memcpy(&v, &bits, sizeof v);
  }
  return true;
}

bool MsgpackReader::readBool(bool& v) {
  if (peek() != Type::kBool) return fail();
  v = *p_++ == 0xc3;
  return true;
}

bool MsgpackReader::readStr(std::string_view& s) {
  if (peek() != Type::kStr) return fail();
  const uint8_t t = *p_++;
  uint32_t n;
  if (t >= 0xa0 && t <= 0xbf) {
    n = t & 0x1f;
  } else if (!readLength(t, n)) {
    return false;
  }
  const uint8_t* at;
  if (!take(n, at)) return false;
  s = std::string_view(reinterpret_cast<const char*>(at), n);
  return true;
}

bool MsgpackReader::readBin(std::string_view& b) {
  if (peek() != Type::kBin) return fail();
  const uint8_t t = *p_++;
  uint32_t n;
  if (!readLength(t, n)) return false;
  const uint8_t* at;
  if (!take(n, at)) return false;
  b = std::string_view(reinterpret_cast<const char*>(at), n);
  return true;
}

bool MsgpackReader::skip() {
  // `pending` counts values still to skip; containers add their elements. Each element takes at
  // least one byte and the headers check that against what remains, so pending stays bounded by
  // the input size.
  uint64_t pending = 1;
  while (pending > 0) {
    --pending;
    const Type ty = peek();
    if (ty == Type::kEnd) return fail();
    const uint8_t t = *p_;
    uint32_t n;
    const uint8_t* at;
    switch (ty) {
      case Type::kArray:
        if (!readArrayHeader(n)) return false;
        pending += n;
        break;
      case Type::kMap:
        if (!readMapHeader(n)) return false;
        pending += uint64_t{n} * 2;
        break;
      case Type::kStr: {
        std::string_view s;
        if (!readStr(s)) return false;
        break;
      }
      case Type::kBin: {
        std::string_view s;
        if (!readBin(s)) return false;
        break;
      }
      case Type::kExt:
        ++p_;
        if (t >= 0xd4) {  // fixext: type byte + 1, 2, 4, 8, 16 data bytes
          if (!take(1 + (size_t{1} << (t - 0xd4)), at)) return false;
        } else {
          if (!readLength(t, n) || !take(size_t{1} + n, at)) return false;
        }
        break;
      case Type::kFloat:
        ++p_;
        if (!take(t == 0xca ? 4 : 8, at)) return false;
        break;
      case Type::kInt: {
        int64_t i;
        uint64_t u;
        if (t >= 0xcc && t <= 0xcf) {
          if (!readUint(u)) return false;
        } else if (!readInt(i)) {
          return false;
        }
        break;
      }
      default:  // nil, bool
        ++p_;
    }
    if (pending > remaining()) return fail();
  }
  return true;
}

}  // namespace kvgate::engines
