// UTF-8 and JavaScript-compatible string helpers used by the lexer and the builtins: JS whitespace
// (String.prototype.trim's set), UTF-16 lengths, code point splitting, ASCII case mapping, and
// JS Number-to-string formatting (Number.prototype.toString / toFixed(1)).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::jinja::text {

// Decodes the code point at s[pos]; sets len to its byte length (invalid bytes: U+FFFD, len 1).
char32_t decode(std::string_view s, size_t pos, size_t& len);
void appendUtf8(std::string& out, char32_t cp);

bool isJsSpace(char32_t cp);                        // JS \s and trim()
size_t spaceLenAt(std::string_view s, size_t pos);  // bytes of the JS whitespace at pos, or 0
std::string_view trimStart(std::string_view s);
std::string_view trimEnd(std::string_view s);
std::string_view trim(std::string_view s);

size_t utf16Length(std::string_view s);      // JS string .length
size_t codePointLength(std::string_view s);  // Python len(str)
bool isPySpace(char32_t cp);                 // Python str.isspace()
// Python str.strip/lstrip/rstrip: `chars` null strips Python whitespace, else its code points.
std::string pyStrip(std::string_view s, const std::string* chars, bool left, bool right);
std::vector<std::string_view> codePoints(std::string_view s);  // Array.from(str)

std::string asciiUpper(std::string_view s);
std::string asciiLower(std::string_view s);
std::string titleCase(std::string_view s);   // JS /\b\w/g -> upper; the rest unchanged
std::string capitalize(std::string_view s);  // first character upper; the rest unchanged

std::string jsNumber(double d);   // String(number)
std::string floatRepr(double d);  // @huggingface/jinja FloatValue.toString()
// JS Number(string) (for loose ==); returns NaN when not numeric.
double jsToNumber(std::string_view s);
// parseInt(s, 10) / parseFloat(s); ok=false when JS would return NaN.
int64_t jsParseInt(std::string_view s, bool& ok);
double jsParseFloat(std::string_view s, bool& ok);

}  // namespace kvgate::jinja::text
