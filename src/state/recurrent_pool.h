// Gated DeltaNet state for all recurrent layers, one slot per sequence: the delta-rule state
// S [n_v][d_k][d_v] and the conv window [K-1][conv_dim], both f32 (rollback must be exact).
// With spec_capacity > 0 each slot also has, per layer, room for a speculative segment of up
// to that many rows: the conv inputs [old window ; the rows] and the delta rule's inputs of the
// rows (q, k, v after the conv and norms; the gates g and beta). Verification leaves the state
// as it was, so committing any prefix of the segment is a copy of the window and a replay of
// the kept rows' delta rule from those inputs (16 verify rows used to write 16 states a layer,
// 3 MB each at the 27B shape; the inputs are 41 KB a row).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace df {

class RecurrentPool {
 public:
  RecurrentPool(Backend& be, int n_layers, int n_slots, const GdnShape& shape, int conv_kernel,
                int spec_capacity = 0);
  ~RecurrentPool();
  RecurrentPool(const RecurrentPool&) = delete;
  RecurrentPool& operator=(const RecurrentPool&) = delete;

  float* state(int slot, int layer) const { return base_ + slot_offset(slot) + size_t(layer) * layer_floats_; }
  float* conv(int slot, int layer) const { return state(slot, layer) + state_floats_; }
  size_t bytes() const { return (total_floats_ + spec_total_floats_) * sizeof(float); }

  int spec_capacity() const { return spec_capacity_; }
  // [K-1 + spec_capacity][conv_dim]: the window before the segment, then the segment's inputs.
  float* conv_history(int slot, int layer) const { return spec_layer(slot, layer); }
  // [spec_capacity][conv_dim]: the segment's delta-rule inputs q | k | v, a row each.
  float* replay_qkv(int slot, int layer) const { return spec_layer(slot, layer) + history_floats_; }
  // [2][spec_capacity][n_v]: the segment's gates, g (rows 0 .. spec_capacity - 1) then beta.
  float* replay_gates(int slot, int layer) const {
    return replay_qkv(slot, layer) + size_t(spec_capacity_) * conv_dim_;
  }
  size_t state_floats() const { return state_floats_; }
  size_t conv_floats() const { return conv_floats_; }
  // Floats from one layer's state (or conv window) to the next layer's in a slot, and from one
  // layer's speculative area to the next's: one strided copy (copy_2d) moves a piece of every
  // layer.
  size_t layer_stride() const { return layer_floats_; }
  size_t spec_layer_stride() const { return spec_layer_floats_; }

  int alloc_slot();  // -1 when exhausted; the slot is zeroed
  void free_slot(int slot);
  void clear_slot(int slot);

 private:
  size_t slot_offset(int slot) const { return size_t(slot) * slot_floats_; }
  float* spec_layer(int slot, int layer) const {
    return spec_area_ + (size_t(slot) * n_layers_ + size_t(layer)) * spec_layer_floats_;
  }
  Backend& be_;
  int n_layers_, n_slots_;
  size_t state_floats_, conv_floats_, layer_floats_, slot_floats_, total_floats_;
  size_t conv_dim_ = 0, history_floats_ = 0;
  float* base_ = nullptr;
  int spec_capacity_ = 0;
  size_t spec_layer_floats_ = 0, spec_total_floats_ = 0;
  float* spec_area_ = nullptr;
  std::vector<int> free_;
  std::vector<float> zeros_;
};

}  // namespace df
