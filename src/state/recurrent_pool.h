// Gated DeltaNet state for all recurrent layers, one slot per sequence: the delta-rule state
// S [n_v][d_k][d_v] and the conv window [K-1][conv_dim], both f32 (rollback must be exact).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace df {

class RecurrentPool {
 public:
  RecurrentPool(Backend& be, int n_layers, int n_slots, const GdnShape& shape, int conv_kernel);
  ~RecurrentPool();
  RecurrentPool(const RecurrentPool&) = delete;
  RecurrentPool& operator=(const RecurrentPool&) = delete;

  float* state(int slot, int layer) const { return base_ + slot_offset(slot) + size_t(layer) * layer_floats_; }
  float* conv(int slot, int layer) const { return state(slot, layer) + state_floats_; }
  size_t bytes() const { return total_floats_ * sizeof(float); }

  int alloc_slot();  // -1 when exhausted; the slot is zeroed
  void free_slot(int slot);
  void clear_slot(int slot);

 private:
  size_t slot_offset(int slot) const { return size_t(slot) * slot_floats_; }
  Backend& be_;
  int n_layers_, n_slots_;
  size_t state_floats_, conv_floats_, layer_floats_, slot_floats_, total_floats_;
  float* base_ = nullptr;
  std::vector<int> free_;
  std::vector<float> zeros_;
};

}  // namespace df
