// CycleState: a stage's slot lives for one request (fresh in the next), is its own (another
// stage or another type gets another slot), and nothing of a request outlives endRequest().
#include "routing/cycle_state.h"

#include <gtest/gtest.h>

namespace kvgate::routing {
namespace {

struct Memo {
  std::vector<int> v;
  bool ready = false;
};
struct Other {
  int x = 0;
};

TEST(CycleState, ASlotLastsOneRequest) {
  CycleState cy;
  const int a = 0, b = 0;  // two stages' addresses
  Memo& m = cy.slot<Memo>(&a);
  m.v = {1, 2, 3};
  m.ready = true;
  EXPECT_TRUE(cy.slot<Memo>(&a).ready);  // the same request: the same slot
  EXPECT_FALSE(cy.slot<Memo>(&b).ready);  // another stage: its own
  cy.slot<Other>(&a).x = 7;               // another type under the same owner: its own
  EXPECT_TRUE(cy.slot<Memo>(&a).ready);
  EXPECT_EQ(cy.slot<Other>(&a).x, 7);
  cy.beginRouting();  // the next request's routing
  EXPECT_FALSE(cy.slot<Memo>(&a).ready);
  EXPECT_TRUE(cy.slot<Memo>(&a).v.empty());
  EXPECT_EQ(cy.slot<Other>(&a).x, 0);
}

// A slot type with reset() keeps its buffers' capacity from request to request.
struct Kept {
  std::vector<int> v;
  bool ready = false;
  void reset() {
    v.clear();
    ready = false;
  }
};

TEST(CycleState, ASlotWithResetKeepsItsCapacity) {
  CycleState cy;
  const int a = 0;
  Kept& k = cy.slot<Kept>(&a);
  k.v.assign(1000, 1);
  k.ready = true;
  cy.beginRouting();
  Kept& again = cy.slot<Kept>(&a);
  EXPECT_FALSE(again.ready);
  EXPECT_TRUE(again.v.empty());
  EXPECT_GE(again.v.capacity(), 1000u);  // no allocation for the next request
}

TEST(CycleState, EndRequestDropsTheRequestsState) {
  CycleState cy;
  cy.tokens.assign(100000, 5);
  cy.tokens_ready = cy.tokens_ok = true;
  cy.tokens_cut = 9;
  cy.chain.assign(8192, 1);
  cy.chain_ready = true;
  cy.tail_blocks = 3;
  cy.remote.state = RemoteHint::State::kAnswered;
  cy.remote.replicas = {{"127.0.0.1:1", 16}};
  cy.endRequest();
  EXPECT_EQ(cy.tokens.capacity(), 0u);  // the ids are not kept
  EXPECT_FALSE(cy.tokens_ready || cy.tokens_ok);
  EXPECT_EQ(cy.tokens_cut, 0u);
  EXPECT_FALSE(cy.chain_ready);
  EXPECT_EQ(cy.tail_blocks, 0u);
  EXPECT_LE(cy.chain.capacity(), 512u);  // a huge chain's buffer goes
  EXPECT_EQ(cy.remote.state, RemoteHint::State::kNone);
  EXPECT_TRUE(cy.remote.replicas.empty());
  // beginRouting keeps the ids the quota gate computed before routing.
  cy.tokens = {1, 2};
  cy.tokens_ready = true;
  cy.beginRouting();
  EXPECT_TRUE(cy.tokens_ready);
  EXPECT_EQ(cy.tokens.size(), 2u);
}

TEST(CycleState, SlotsOfOwnersSinceGoneAreBounded) {
  CycleState cy;
  std::vector<int> owners(100);
  for (auto& o : owners) {  // 100 stages over 100 requests (rules come and go)
    cy.beginRouting();
    cy.slot<Memo>(&o).ready = true;
  }
  EXPECT_LE(cy.slotCount(), 16u);
  // The slots in use in the current request are kept when the bound drops the others.
  Memo& last = cy.slot<Memo>(&owners.back());
  EXPECT_TRUE(last.ready);
  cy.beginRouting();
  for (int i = 0; i < 12; ++i) cy.slot<Memo>(&owners[static_cast<size_t>(i)]).ready = true;
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(cy.slot<Memo>(&owners[static_cast<size_t>(i)]).ready);
}

}  // namespace
}  // namespace kvgate::routing
