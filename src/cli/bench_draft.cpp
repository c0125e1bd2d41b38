#include "cli/bench_draft.h"

#include <algorithm>
#include <chrono>

#include <random>

#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "spec/verify.h"
#include "util/error.h"

namespace df::cli {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

nlohmann::json bench_draft(LoadedModel& m, const DraftBenchInput& in) {
  auto file = gguf::File::open(in.draft_path);
  const int trained = DraftHParams::from_gguf(*file).block_size;
  Backend& be = m.model->backend();
  nlohmann::json rows = nlohmann::json::array();
  for (int block : {8, 16}) {
    if (block > trained) continue;
    const auto v = in.verify_ms.find(block);
    if (v == in.verify_ms.end()) continue;
    DraftModel draft(*file, *m.model, block);
    // Room for the greedy steps (one token each) and the two sampled runs (up to a block each).
    const int ctx = int(in.prompt.size()) + block + in.reps + 8 + 2 * (in.reps + 2) * block;
    auto tstate = m.model->make_state(1, ctx, block);
    auto dstate = draft.make_state(1, ctx);
    const int ts = tstate->create(), ds = dstate->create();
    // Context: the prompt through the target, its features into the drafter.
    const int chunk = m.model->options().max_batch_rows;
    ForwardOutput out;
    for (size_t i0 = 0; i0 < in.prompt.size(); i0 += size_t(chunk)) {
      Batch b;
      const size_t n = std::min(in.prompt.size() - i0, size_t(chunk));
      for (size_t i = 0; i < n; ++i) b.add(ts, int(i0 + i), in.prompt[i0 + i], i + 1 == n);
      m.model->forward(b, *tstate, out);
      draft.ingest(*dstate, ds, m.model->features(), int(n));
    }
    // One greedy speculative step as SpecDecoder runs it, with nothing accepted: the drafter's
    // block, the verify forward of anchor + drafts (kept inputs, argmax ids), the commit of the
    // anchor row (its delta-rule replay, the conv window copy) and the drafter's ingest of it
    // (padded to the block).
    const int n_vocab = m.model->hparams().n_vocab;
    std::vector<int32_t> ids;
    std::vector<double> ms, vms;
    int32_t anchor = in.prompt.back();
    for (int r = -2; r < in.reps; ++r) {  // r < 0: warm-up (CUDA graphs: capture, or op by op first)
      be.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      draft.draft_greedy(*dstate, ds, anchor, n_vocab, ids);
      be.synchronize();
      const auto t1 = std::chrono::steady_clock::now();
      Batch b;
      const int p0 = tstate->get(ts).n_past;
      b.add_speculative(ts, p0, anchor);
      for (int i = 0; i + 1 < block; ++i) b.add_speculative(ts, p0 + 1 + i, ids[size_t(i)]);
      out.greedy_only = n_vocab;
      m.model->forward(b, *tstate, out);
      {
        StepScope step(be);  // as the decoders run it: the commit and the drafter's padded ingest, one step
        m.model->commit(*tstate, ts, 1);
        draft.ingest_padded(*dstate, ds, m.model->features(), 1, block);
      }
      be.synchronize();
      const auto t2 = std::chrono::steady_clock::now();
      anchor = out.greedy[0];
      if (r >= 0) {
        ms.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e3);
        vms.push_back(std::chrono::duration<double>(t2 - t1).count() * 1e3);
      }
    }
    // The same step sampled (T = 0.7, top_k 40, top_p 0.95, min_p 0.05), from the drafter's block
    // to the commit: drafts drawn from the drafter's distribution, the rejection rule, the
    // next token; on full logits (the dense rules, every row's n_vocab logits downloaded) and
    // on the rows' top 40 candidates (spec/verify.h's top-candidate rules).
    const int kTop = std::min(40, n_vocab);
    SamplingParams sp;
    sp.temperature = 0.7f, sp.top_k = kTop, sp.top_p = 0.95f, sp.min_p = 0.05f;
    double sampled_ms[2] = {0, 0};
    for (int top = 0; top < 2; ++top) {
      Sampler sampler(sp, n_vocab), dsampler(spec::draft_sampling(sp), n_vocab);
      std::mt19937_64 rng(7);
      std::vector<int32_t> drafts(size_t(block - 1)), top_ids;
      std::vector<float> dlogits, top_logits;
      std::vector<std::vector<float>> qs;
      std::vector<spec::SparseDist> qs_top;
      std::vector<double> sms;
      for (int r = -2; r < in.reps; ++r) {
        be.synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        if (top) {
          draft.draft_top_k(*dstate, ds, anchor, kTop, n_vocab, top_ids, top_logits);
          spec::choose_drafts_top(spec::TopRows{top_ids, top_logits, size_t(kTop)}, false, dsampler, rng, drafts, qs_top);
        } else {
          draft.draft(*dstate, ds, anchor, dlogits);
          spec::choose_drafts(dlogits, size_t(n_vocab), n_vocab, false, dsampler, rng, drafts, qs);
        }
        Batch b;
        const int p0 = tstate->get(ts).n_past;
        b.add_speculative(ts, p0, anchor);
        for (int i = 0; i + 1 < block; ++i) b.add_speculative(ts, p0 + 1 + i, drafts[size_t(i)]);
        out.greedy_only = 0;
        out.top_k_only = top ? kTop : 0;
        out.top_k_limit = n_vocab;
        m.model->forward(b, *tstate, out);
        out.top_k_only = 0;
        auto keep_going = [](int32_t) { return true; };
        const spec::TopRows rows_top{out.top_ids, out.top_logits, size_t(kTop)};
        const spec::BlockWalk w =
            top ? spec::walk_block_top(rows_top, drafts, qs_top, false, sampler, rng, keep_going)
                : spec::walk_block(out.logits, size_t(n_vocab), drafts, qs, false, sampler, rng, keep_going);
        if (w.next) anchor = *w.next;
        else if (top) anchor = sampler.sample_top(rows_top.ids_of(size_t(w.next_row)), rows_top.logits_of(size_t(w.next_row)));
        else anchor = sampler.sample(std::span<const float>(out.logits).subspan(size_t(w.next_row) * size_t(n_vocab), size_t(n_vocab)));
        {
          StepScope step(be);
          m.model->commit(*tstate, ts, w.kept);
          draft.ingest_padded(*dstate, ds, m.model->features(), w.kept, block);
        }
        be.synchronize();
        if (r >= 0) sms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
      }
      sampled_ms[top] = median(sms);
    }
    const double d = median(ms), ver = median(vms), cost = (d + ver) / in.plain_step_ms;
    nlohmann::json proj = nlohmann::json::object();
    for (double tau : in.taus) proj[std::to_string(int(tau))] = tau / cost;  // tau tokens per draft+verify
    rows.push_back({{"block", block}, {"draft_ms", d}, {"verify_ms", ver}, {"plain_forward_ms", v->second},
                    {"plain_step_ms", in.plain_step_ms},
                    {"sampled_step_ms", sampled_ms[0]}, {"sampled_top_step_ms", sampled_ms[1]},
                    {"cost_vs_plain", cost}, {"projected_speedup_at_tau", proj}});
  }
  return rows;
}

}  // namespace df::cli
