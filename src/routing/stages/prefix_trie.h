// PrefixTrie: Tier 1's memory of the prompts this gateway routed (seed 000, "Tier 1 — radix-trie
// prefix affinity"), per P/D rule.
//
// A prompt is its rendered text (proxy/facts_parser.cc: model, cache salt, then the prompt's
// bytes, at most kTrieRenderBytes) cut into pieces of kTrieChunk bytes over its first
// kTrieFineBytes and of kTrieCoarseChunk bytes after (short prompts match finely, long ones
// cost few nodes), the last one partial; node i
// is the XXH3 chain over pieces 0..i (a radix trie whose edges are chunks, stored as a hashed
// map: a node is present only if all its ancestors were inserted with it). Each node remembers
// the endpoint that last served a prompt through it. Bounded: at most LOXILB_PD_TRIE_MAX_NODES
// nodes (default 262144, about 20 MiB), the least recently touched go first. It tracks what the
// gateway routed, not what the engines hold: Tier 1.5 tracks the truth.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "endpoints/endpoint.h"
#include "routing/stages/lru_map.h"

namespace kvgate::routing {

constexpr size_t kTrieChunk = 256;
constexpr size_t kTrieFineBytes = 2048;
constexpr size_t kTrieCoarseChunk = 1024;
constexpr size_t kTrieRenderBytes = 16 * 1024;

struct TrieNode {
  uint64_t key = 0;
  size_t end = 0;  // bytes of the prompt covered up to and including this node
};

// The chain of nodes of a rendered prompt, keyed under (model, salt).
void trieChain(std::string_view model, std::string_view salt, std::string_view text,
               std::vector<TrieNode>& out);

class PrefixTrie {
 public:
  static constexpr size_t kDefaultMaxNodes = 262'144;
  explicit PrefixTrie(size_t max_nodes = kDefaultMaxNodes) : nodes_(max_nodes) {}
  struct Match {
    size_t bytes = 0;  // the matched prefix
    endpoints::EndpointId endpoint = 0;
  };
  // The deepest node of `chain` that is present, by binary search: nodes are inserted whole
  // chains at a time, so the present ones are a prefix of the chain (an ancestor evicted before
  // its descendants only shortens the match; the next insert heals it).
  Match longest(const std::vector<TrieNode>& chain) const {
    Match m;
    size_t lo = 0, hi = chain.size();  // chain[0, lo) known present, chain[hi, n) absent
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (auto ep = nodes_.get(chain[mid].key)) {
        m = {chain[mid].end, *ep};
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return m;
  }
  // `chain` was routed to `endpoint`; `known` is longest(chain) before. When the whole chain
  // already leads there only its deepest node is touched (kept recent); otherwise every node
  // now leads to `endpoint`.
  void insert(const std::vector<TrieNode>& chain, endpoints::EndpointId endpoint, Match known) {
    if (chain.empty()) return;
    if (known.endpoint == endpoint && known.bytes == chain.back().end) {
      nodes_.put(chain.back().key, endpoint);
      return;
    }
    for (const auto& n : chain) nodes_.put(n.key, endpoint);
  }
  size_t size() const { return nodes_.size(); }

 private:
  ShardedLru<endpoints::EndpointId> nodes_;
};

}  // namespace kvgate::routing
