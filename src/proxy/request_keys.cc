#include "proxy/request_keys.h"

#include "routing/prefix_key.h"
#include "routing/selectors/hash_ring.h"

namespace kvgate::proxy {

std::string_view listParam(std::string_view list, char sep, std::string_view key) {
  while (!list.empty()) {
    size_t end = list.find(sep);
    std::string_view item = list.substr(0, end);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    size_t eq = item.find('=');
    if (item.substr(0, eq) == key)
      return eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (end == std::string_view::npos) break;
    list.remove_prefix(end + 1);
  }
  return {};
}

routing::RequestContext requestContext(const http::RequestHead& head,
                                       const routing::RequestFacts* facts, const Route& route,
                                       uint64_t source_key) {
  routing::RequestContext ctx;
  ctx.facts = facts;
  ctx.source_key = source_key;
  const auto& rule = route.rule;
  auto hashOf = [](std::string_view v) { return routing::hashBytes(v.data(), v.size()); };
  if (route.needs & routing::kNeedPromptPrefix) {
    if (facts) ctx.prefix_key = routing::prefixKey(*facts);
  }
  // The conversation: the X-Conversation-Id header, else the body's user_id (P/D Tier 0), else
  // its user (chwbl's fallback key).
  if (route.needs & (routing::kNeedUser | routing::kNeedUserId)) {
    std::string_view conv = head.get("x-conversation-id");
    if (!conv.empty())
      ctx.conversation_key = hashOf(conv);
    else if (facts && facts->user_id && (route.needs & routing::kNeedUserId))
      ctx.conversation_key = hashOf(*facts->user_id);
    else if (facts && facts->user && (route.needs & routing::kNeedUser))
      ctx.conversation_key = hashOf(*facts->user);
  }
  if ((route.needs & routing::kNeedSession) && !rule.session_header_name.empty()) {
    std::string_view name = rule.session_header_name;
    std::string_view value;
    if (name.starts_with("cookie:")) {
      value = listParam(head.get("cookie"), ';', name.substr(7));
    } else if (name.starts_with("query:")) {
      std::string_view t = head.target;
      size_t q = t.find('?');
      if (q != std::string_view::npos) value = listParam(t.substr(q + 1), '&', name.substr(6));
    } else if (name == "basic-auth") {
      value = head.get("authorization");  // the whole credential identifies the user
    } else {
      value = head.get(name);
    }
    if (!value.empty()) ctx.session_key = hashOf(value);
  }
  return ctx;
}

}  // namespace kvgate::proxy
