#include "state/recurrent_pool.h"

namespace df {

RecurrentPool::RecurrentPool(Backend& be, int n_layers, int n_slots, const GdnShape& shape, int conv_kernel,
                             int spec_capacity)
    : be_(be), n_layers_(n_layers), n_slots_(n_slots), spec_capacity_(spec_capacity) {
  state_floats_ = shape.state_floats();
  conv_floats_ = size_t(conv_kernel - 1) * shape.conv_dim();
  layer_floats_ = state_floats_ + conv_floats_;
  slot_floats_ = layer_floats_ * size_t(n_layers);
  total_floats_ = slot_floats_ * size_t(n_slots);
  base_ = static_cast<float*>(be_.alloc(std::max<size_t>(total_floats_, 1) * sizeof(float)));
  for (int s = n_slots - 1; s >= 0; --s) free_.push_back(s);
  conv_dim_ = size_t(shape.conv_dim());
  if (spec_capacity_ > 0) {
    history_floats_ = size_t(conv_kernel - 1 + spec_capacity_) * conv_dim_;
    spec_layer_floats_ = history_floats_ + size_t(spec_capacity_) * (conv_dim_ + 2 * size_t(shape.n_v));
    spec_total_floats_ = spec_layer_floats_ * size_t(n_layers) * size_t(n_slots);
    spec_area_ = static_cast<float*>(be_.alloc(spec_total_floats_ * sizeof(float)));
  }
}

RecurrentPool::~RecurrentPool() {
  be_.release(base_);
  if (spec_area_) be_.release(spec_area_);
}

int RecurrentPool::alloc_slot() {
  if (free_.empty()) return -1;
  const int s = free_.back();
  free_.pop_back();
  clear_slot(s);
  return s;
}

void RecurrentPool::free_slot(int slot) { free_.push_back(slot); }

void RecurrentPool::clear_slot(int slot) {
  // One layer of zeros at a time: a whole slot is 144 MB for a 27B model.
  if (zeros_.size() < layer_floats_) zeros_.assign(layer_floats_, 0.0f);
  for (int l = 0; l < n_layers_; ++l) be_.upload(state(slot, l), zeros_.data(), layer_floats_ * sizeof(float));
}

}  // namespace df
