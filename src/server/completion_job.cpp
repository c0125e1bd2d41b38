#include "server/completion_job.h"

#include "server/api_error.h"
#include "server/openai_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace df::server {

using nlohmann::json;

CompletionJob::CompletionJob(JobSetup setup, const Tokenizer& tok)
    : s_(std::move(setup)), tok_(tok), output_(s_.output) {
  if (s_.stream && s_.kind == ApiKind::Chat) {
    // The role chunk goes out at once, before the request even leaves the queue.
    emit(json{{"index", 0},
              {"delta", {{"role", "assistant"}, {"content", ""}}},
              {"logprobs", nullptr},
              {"finish_reason", nullptr}});
  }
  if (s_.reasoning_budget == 0 && s_.output.starts_in_reasoning) {
    close_forced_ = true;
    forced_prefix_ = s_.think_close_tokens;
  }
  // The answer starts with the prompt (no thinking, or a closed one): the opening goes first.
  if (!s_.output.starts_in_reasoning || close_forced_) {
    tool_opening_forced_ = true;
    forced_prefix_.insert(forced_prefix_.end(), s_.tool_call_opening.begin(), s_.tool_call_opening.end());
  }
}

json CompletionJob::chunk(json choice) const {
  json c = {{"id", s_.id},
            {"object", s_.kind == ApiKind::Chat ? "chat.completion.chunk" : "text_completion"},
            {"created", s_.created},
            {"model", s_.model},
            {"choices", json::array({std::move(choice)})}};
  return c;
}

json CompletionJob::take_logprobs() {
  if (s_.top_logprobs < 0) return nullptr;
  json lp;
  if (s_.kind == ApiKind::Chat) {
    lp = json{{"content", std::move(logprobs_)}};
    logprobs_ = json::array();
  } else {
    // Legacy completions shape: parallel lists.
    json tokens = json::array(), token_lp = json::array(), top = json::array(), offsets = json::array();
    for (json& e : logprobs_) {
      tokens.push_back(e["token"]);
      token_lp.push_back(e["logprob"]);
      json alts = json::object();
      for (const json& t : e["top_logprobs"]) alts[t["token"].get<std::string>()] = t["logprob"];
      top.push_back(std::move(alts));
      offsets.push_back(e["text_offset"]);
    }
    logprobs_ = json::array();
    lp = json{{"tokens", tokens}, {"token_logprobs", token_lp}, {"top_logprobs", top}, {"text_offset", offsets}};
  }
  return lp;
}

void CompletionJob::emit(json choice) {
  if (!choice.contains("logprobs")) choice["logprobs"] = take_logprobs();
  json c = chunk(std::move(choice));
  if (s_.include_usage) c["usage"] = nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  frames_ += sse_frame(c);
  cv_.notify_all();
}

void CompletionJob::emit_pieces(std::vector<OutputPiece>& pieces) {
  for (OutputPiece& p : pieces) {
    if (p.kind == OutputPiece::Kind::ToolCall) {
      json tc = tool_call_json(p.call);
      tool_calls_.push_back(tc);
      tc["index"] = tool_index_++;
      if (s_.stream)
        emit(json{{"index", 0}, {"delta", {{"tool_calls", json::array({tc})}}}, {"finish_reason", nullptr}});
      continue;
    }
    const bool reasoning = p.kind == OutputPiece::Kind::Reasoning;
    (reasoning ? reasoning_ : content_) += p.text;
    if (!s_.stream) continue;
    if (s_.kind == ApiKind::Text) {
      emit(json{{"index", 0}, {"text", p.text}, {"finish_reason", nullptr}});
    } else {
      emit(json{{"index", 0}, {"delta", {{reasoning ? "reasoning_content" : "content", p.text}}}, {"finish_reason", nullptr}});
    }
  }
  pieces.clear();
}

TokenDecision CompletionJob::on_token(const TokenEvent& ev) {
  TokenDecision d;
  // Thinking tokens the model chose (a forced close is not thinking).
  if (output_.in_reasoning() && !ev.forced) ++reasoning_tokens_;
  if (ev.logprobs && !ev.eog) {
    json e = chat_logprob_entry(tok_, ev.id, *ev.logprobs);
    if (s_.kind == ApiKind::Text) {
      e["text_offset"] = text_offset_;
      text_offset_ += int(tok_.token_bytes(ev.id).size());
    }
    logprobs_.push_back(std::move(e));
  }
  std::vector<OutputPiece> pieces;
  output_.push(ev.text, pieces);
  emit_pieces(pieces);
  if (output_.stopped()) d.stop = true;
  if (s_.reasoning_budget >= 0 && !close_forced_ && output_.in_reasoning() && reasoning_tokens_ >= s_.reasoning_budget) {
    close_forced_ = true;
    d.force = s_.think_close_tokens;
  }
  // A forced tool call opens as soon as thinking is over (closed by the model or by the budget).
  if (!tool_opening_forced_ && !output_.in_reasoning()) {
    tool_opening_forced_ = true;
    d.force.insert(d.force.end(), s_.tool_call_opening.begin(), s_.tool_call_opening.end());
  }
  return d;
}

std::string CompletionJob::finish_reason(const GenerationResult& r) const {
  if (r.finish == FinishReason::Length && !output_.stopped()) return "length";
  return tool_index_ > 0 ? "tool_calls" : "stop";
}

void CompletionJob::on_done(const GenerationResult& r) {
  result_ = r;
  if (r.finish == FinishReason::Cancelled) {
    status_ = 499;
  } else if (r.finish == FinishReason::Error) {
    status_ = 500;
    const json err = error_json(500, "generation failed: " + r.error);
    if (s_.stream) {
      std::lock_guard<std::mutex> lk(mu_);
      frames_ += sse_frame(err);
      frames_ += kSseDone;
    } else {
      body_ = dump_json(err);
    }
  } else {
    std::vector<OutputPiece> pieces;
    output_.push(r.tail_text, pieces);
    output_.finish(pieces);
    emit_pieces(pieces);
    const std::string reason = finish_reason(r);
    json usage = usage_json(s_.prompt_tokens, r.generated_tokens, reasoning_tokens_, s_.kind == ApiKind::Chat);
    if (r.draft_steps > 0)  // deltaflash extension: how speculative decoding went for this request
      usage["speculation"] = {{"draft_steps", r.draft_steps},
                              {"drafted_tokens", r.drafted_tokens},
                              {"accepted_tokens", r.accepted_tokens},
                              {"mean_accept_len", double(r.accepted_tokens + r.draft_steps) / r.draft_steps}};
    if (s_.stream) {
      if (s_.kind == ApiKind::Chat) emit(json{{"index", 0}, {"delta", json::object()}, {"finish_reason", reason}});
      else emit(json{{"index", 0}, {"text", ""}, {"finish_reason", reason}});
      std::lock_guard<std::mutex> lk(mu_);
      if (s_.include_usage) {
        json u = chunk(json());
        u["choices"] = json::array();
        u["usage"] = usage;
        frames_ += sse_frame(u);
      }
      frames_ += kSseDone;
    } else {
      json choice = {{"index", 0}, {"logprobs", take_logprobs()}, {"finish_reason", reason}};
      json resp;
      if (s_.kind == ApiKind::Chat) {
        json msg = {{"role", "assistant"}, {"content", content_}};
        if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
        if (!tool_calls_.empty()) {
          msg["tool_calls"] = tool_calls_;
          if (content_.empty()) msg["content"] = nullptr;
        }
        choice["message"] = std::move(msg);
      } else {
        choice["text"] = content_;
      }
      resp = {{"id", s_.id},
              {"object", s_.kind == ApiKind::Chat ? "chat.completion" : "text_completion"},
              {"created", s_.created},
              {"model", s_.model},
              {"choices", json::array({std::move(choice)})},
              {"usage", usage}};
      body_ = dump_json(resp);
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  done_ = true;
  cv_.notify_all();
}

CompletionJob::Wait CompletionJob::wait(std::string& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return done_ || !frames_.empty(); });
  if (!frames_.empty()) {
    out += frames_;
    frames_.clear();
    return Wait::Data;
  }
  return done_ ? Wait::Done : Wait::Timeout;
}

}  // namespace df::server
