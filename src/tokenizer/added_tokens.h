// Added-token splitting (tokenizer.json "added_tokens"), done before anything else, on the raw
// text, as HF does: every added token, special or not, is matched leftmost-longest. Tokens with
// normalized=false are matched on the raw text; the gaps between them are normalized and then
// searched for the normalized=true tokens. lstrip/rstrip absorb adjacent whitespace into the
// match; single_word drops a match that touches a word character on either side.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::tok {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// A piece of the input: plain text (id == kText) or one added token.
struct Segment {
  static constexpr uint32_t kText = UINT32_MAX;
  size_t begin, end;  // byte range in the searched string
  uint32_t id;
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& t);
  bool empty() const { return tokens_.empty(); }
  // Splits `s` (valid UTF-8) into text segments and token segments, in order; empty text
  // segments are omitted.
  void split(std::string_view s, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_{1};
  int32_t root_[256];
  bool root_ready_ = false;
};

}  // namespace kvgate::tok
