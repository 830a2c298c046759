// Byte trie for the added-token split; see added_tokens.h. At each position the trie walk finds
// the longest token starting there (leftmost-longest overall); matching resumes after it.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "common/utf8.h"

namespace kvgate::tok {

void AddedTokenMatcher::add(const AddedToken& t) {
  if (t.content.empty()) return;
  int32_t node = 0;
  for (unsigned char b : t.content) {
    auto& nx = nodes_[node].next;
    auto it =
        std::lower_bound(nx.begin(), nx.end(), std::make_pair(static_cast<uint8_t>(b), INT32_MIN));
    if (it != nx.end() && it->first == b) {
      node = it->second;
    } else {
      int32_t fresh = static_cast<int32_t>(nodes_.size());
      nx.insert(it, {static_cast<uint8_t>(b), fresh});
      nodes_.emplace_back();
      node = fresh;
    }
  }
  if (nodes_[node].token < 0) {  // the first definition of a content wins
    nodes_[node].token = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(t);
  }
  for (int b = 0; b < 256; ++b) root_[b] = -1;
  for (auto& [b, n] : nodes_[0].next) root_[b] = n;
  root_ready_ = true;
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& nx = nodes_[node].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(b, INT32_MIN));
  return (it != nx.end() && it->first == b) ? it->second : -1;
}

namespace {

uint32_t lastCodePoint(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t j = i;
  return nextCodePoint(s, j);
}
bool isWordChar(uint32_t c) { return c == '_' || (cpFlags(c) & (kL | kN)) != 0; }
bool isSpace(uint32_t c) { return (cpFlags(c) & kWS) != 0; }

}  // namespace

void AddedTokenMatcher::split(std::string_view s, std::vector<Segment>& out) const {
  if (tokens_.empty() || !root_ready_) {
    if (!s.empty()) out.push_back({0, s.size(), Segment::kText});
    return;
  }
  size_t gap = 0, i = 0;
  while (i < s.size()) {
    int32_t node = root_[static_cast<unsigned char>(s[i])];
    if (node < 0) {
      ++i;
      continue;
    }
    int32_t best = -1;
    size_t best_end = 0, j = i + 1;
    for (;;) {
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = j;
      }
      if (j >= s.size()) break;
      node = child(node, static_cast<unsigned char>(s[j]));
      if (node < 0) break;
      ++j;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[best];
    size_t start = i, stop = best_end;
    if (t.single_word) {
      bool left_ok = start == 0 || !isWordChar(lastCodePoint(s, start));
      size_t k = stop;
      bool right_ok = stop == s.size() || !isWordChar(nextCodePoint(s, k));
      if (!left_ok || !right_ok) {
        i = best_end;  // HF drops the match and continues after it
        continue;
      }
    }
    if (t.lstrip)
      while (start > gap && isSpace(lastCodePoint(s, start))) {
        --start;
        while (start > gap && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      }
    if (t.rstrip)
      while (stop < s.size()) {
        size_t k = stop;
        if (!isSpace(nextCodePoint(s, k))) break;
        stop = k;
      }
    if (start > gap) out.push_back({gap, start, Segment::kText});
    out.push_back({start, stop, t.id});
    gap = i = stop;
  }
  if (gap < s.size()) out.push_back({gap, s.size(), Segment::kText});
}

}  // namespace kvgate::tok
