// DFlashSource defers the drafter's ingest of plain steps' rows to a backlog (a block's rows,
// ingested in one padded step when full or before the drafter is next used). The drafter must
// then propose exactly what it proposes when every row is ingested at once, one by one: this
// test feeds the demo pair's target row by row and compares the deferred source's proposal
// logits, bit for bit, with a drafter state that ingested each row eagerly, at backlog fills
// below, at and past a block, after a prompt chunk longer than a block, and after a reset.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "model/batch.h"
#include "spec/draft_source.h"
#include "support/demo_pair.h"

namespace df {
namespace {

TEST(DraftBacklog, DeferredIngestProposesWhatEagerIngestProposes) {
  auto be = make_cpu_backend(1);
  test::DemoPair demo(*be);
  TargetModel& target = demo.target;
  DraftModel& draft = demo.draft;
  const Tokenizer& tok = demo.tok;
  constexpr int kCtx = 256;
  const int B = draft.block_size();
  DFlashSource source(draft, target, kCtx);
  auto ref_state = draft.make_state(1, kCtx);
  const int ref_seq = ref_state->create();
  auto tstate = target.make_state(1, kCtx);
  const int ts = tstate->create();

  std::vector<int32_t> text = tok.encode(
      "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n"
      "        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n",
      false);
  ASSERT_GT(int(text.size()), 2 * B + 8);
  ForwardOutput out;
  Batch b;
  int pos = 0;
  // The first rows as one prompt chunk of more than a block (ingested at once by both).
  const int chunk = B + 3;
  for (int i = 0; i < chunk; ++i) b.add(ts, pos + i, text[size_t(i)], i + 1 == chunk);
  target.forward(b, *tstate, out);
  source.on_target_rows(chunk);
  draft.ingest(*ref_state, ref_seq, target.features(), chunk);
  pos = chunk;

  std::vector<float> got, want;
  int checks = 0;
  // Then one row a step, proposing now and then: after 1, 5, B - 1, B, B + 1, 2B + 2 plain rows.
  int plain = 0;
  for (int i = chunk; i < int(text.size()); ++i) {
    b.clear();
    b.add(ts, pos++, text[size_t(i)], true);
    target.forward(b, *tstate, out);
    source.on_target_rows(1);
    draft.ingest(*ref_state, ref_seq, target.features(), 1);
    ++plain;
    if (plain == 1 || plain == 5 || plain == B - 1 || plain == B || plain == B + 1 || plain == 2 * B + 2) {
      const int32_t anchor = text[size_t(i)];
      source.propose(anchor, B - 1, got);
      draft.draft(*ref_state, ref_seq, anchor, want);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << "proposal after " << plain << " deferred rows differs from eager ingest";
      ++checks;
    }
  }
  EXPECT_EQ(checks, 6);

  // A reset forgets the backlog: a new sequence from its first rows, deferred again.
  source.reset();
  ref_state->reset(ref_seq);
  tstate->reset(ts);
  b.clear();
  for (int i = 0; i < 3; ++i) b.add(ts, i, text[size_t(i)], i == 2);
  target.forward(b, *tstate, out);
  source.on_target_rows(3);  // fewer than a block: into the backlog
  draft.ingest(*ref_state, ref_seq, target.features(), 3);
  source.propose(text[2], B - 1, got);
  draft.draft(*ref_state, ref_seq, text[2], want);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "after a reset";
}

}  // namespace
}  // namespace df
