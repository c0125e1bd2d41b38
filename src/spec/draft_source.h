// Where speculative drafts come from. The decoder tells the source which target rows were
// committed (their captured features are in TargetModel::features()) and asks for proposals
// after an anchor token. DFlash is the product's source; tests add scripted ones.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/draft_model.h"

namespace df {

class TargetModel;

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Rows of one verify block: the anchor plus up to block_size() - 1 drafts.
  virtual int block_size() const = 0;
  // The last target forward's first `kept` rows are now committed context.
  virtual void on_target_rows(int kept) = 0;
  // The same for rows first_row .. first_row + kept - 1 of the last forward (the source's
  // sequence among others in a batch). This default takes first_row 0 only.
  virtual void on_target_rows_from(int first_row, int kept);
  // The same for the kept rows of a verify block starting at first_row (called inside the
  // commit's step). DFlash computes the whole block's rows so the step does not depend on how
  // many were kept (DraftModel::ingest_padded); this default is on_target_rows_from.
  virtual void on_verified_rows(int first_row, int kept) { on_target_rows_from(first_row, kept); }
  // Proposal logits for the n tokens after `anchor` (n <= block_size() - 1): n × n_vocab.
  virtual void propose(int32_t anchor, int n, std::vector<float>& logits) = 0;
  // Greedy proposals: ids receives n ids, each the argmax of its proposal row among ids < limit
  // (ties to the lowest id). This default downloads the logits; DFlash argmaxes on the backend.
  virtual void propose_greedy(int32_t anchor, int n, int limit, std::vector<int32_t>& ids);
  // The same ids left in backend memory of `be` (ids: room for block_size() - 1 int32, the first
  // n the proposals), without waiting for them: the verify batch reads them there
  // (Batch::add_speculative_from) and the host downloads them with the verify's ids, one round
  // trip a step. This default runs propose_greedy and uploads; DFlash argmaxes into ids.
  virtual void propose_greedy_to(int32_t anchor, int n, int limit, Backend& be, int32_t* ids);
  // Proposal rows as their k largest logits among ids < limit, sorted as Backend::top_k_rows
  // sorts them: n x k ids and logits. This default sorts propose()'s logits on the host; DFlash
  // computes them on the backend.
  virtual void propose_top(int32_t anchor, int n, int k, int limit, std::vector<int32_t>& ids, std::vector<float>& logits);
  // Forget the sequence (a new prompt follows).
  virtual void reset() = 0;
};

// DFlash: one drafter forward proposes the whole block from the fused target features.
// The rows of plain steps are not ingested one by one: their features are copied to a backlog
// of up to a block's rows, ingested in one padded step when it is full or before the drafter is
// next used (a draft, a verify block's rows, a prompt chunk). So while the policy has turned
// speculation off, a plain step costs one copy instead of the drafter's context update, and the
// drafter's K/V are the same (its ingest is row by row independent of how rows are grouped).
class DFlashSource final : public DraftSource {
 public:
  DFlashSource(DraftModel& draft, TargetModel& target, int ctx);
  ~DFlashSource() override;
  DFlashSource(const DFlashSource&) = delete;
  DFlashSource& operator=(const DFlashSource&) = delete;
  int block_size() const override { return draft_.block_size(); }
  void on_target_rows(int kept) override;
  void on_target_rows_from(int first_row, int kept) override;
  void on_verified_rows(int first_row, int kept) override;
  void propose(int32_t anchor, int n, std::vector<float>& logits) override;
  void propose_greedy(int32_t anchor, int n, int limit, std::vector<int32_t>& ids) override;
  void propose_greedy_to(int32_t anchor, int n, int limit, Backend& be, int32_t* ids) override;
  void propose_top(int32_t anchor, int n, int k, int limit, std::vector<int32_t>& ids, std::vector<float>& logits) override;
  void reset() override;

 private:
  void flush();             // ingests the backlog
  void begin_draft(int n);  // checks n against the block, then flush()

  DraftModel& draft_;
  TargetModel& target_;
  std::unique_ptr<SequenceStore> state_;
  int seq_ = -1;
  float* backlog_ = nullptr;  // backend memory: block_size() rows of target features
  int pending_ = 0;           // rows in the backlog
};

}  // namespace df
