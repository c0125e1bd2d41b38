#include "support/hf_golden.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace df::test {

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

std::vector<double> read_f64_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  f.seekg(0, std::ios::end);
  const size_t bytes = size_t(f.tellg());
  f.seekg(0);
  std::vector<double> v(bytes / sizeof(double));
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(double)));
  return v;
}

}  // namespace

std::vector<std::string> golden_variant_names(const std::string& data_dir) {
  std::vector<std::string> names;
  const json manifest = read_json(data_dir + "/hf-golden/manifest.json");
  for (const json& v : manifest["variants"]) names.push_back(v["name"]);
  return names;
}

GoldenVariant load_golden_variant(const std::string& data_dir, const std::string& name) {
  GoldenVariant g;
  g.name = name;
  g.dir = data_dir + "/hf-golden/" + name;
  const json golden = read_json(g.dir + "/golden.json");
  const json& cfg = golden["config"];
  g.hf_class = golden["hf_class"];
  g.n_vocab = cfg["vocab_size"];
  g.llama_cpp_can_run = !cfg.contains("linear_key_head_dim") || cfg["linear_key_head_dim"] == cfg["linear_value_head_dim"];
  for (const json& s : golden["sequences"]) {
    GoldenSequence seq;
    for (const json& t : s["token_ids"]) seq.tokens.push_back(t.get<int32_t>());
    seq.logits = read_f64_file(g.dir + "/" + s["logits_file"].get<std::string>());
    if (seq.logits.size() != seq.tokens.size() * size_t(g.n_vocab))
      throw std::runtime_error(g.dir + ": " + s["logits_file"].get<std::string>() + " has the wrong size");
    for (double x : seq.logits) g.max_abs_logit = std::max(g.max_abs_logit, std::abs(x));
    g.sequences.push_back(std::move(seq));
  }
  return g;
}

double max_abs_diff(const std::vector<float>& ours, const std::vector<double>& golden) {
  if (ours.size() != golden.size())
    throw std::runtime_error("logit counts differ: " + std::to_string(ours.size()) + " vs " + std::to_string(golden.size()));
  double m = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    const double d = std::abs(double(ours[i]) - golden[i]);
    if (!std::isfinite(d)) return INFINITY;  // std::max would skip a NaN
    m = std::max(m, d);
  }
  return m;
}

}  // namespace df::test
