// Walks the statement tree and renders it. Scopes follow @huggingface/jinja: a for loop and a
// macro call open a new scope; if and set do not; a macro sees the scope it is called from.
// Recursion depth, loop iterations and output size are bounded, so any template terminates.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace df::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value v) { vars[name] = std::move(v); }
};
using ScopePtr = std::shared_ptr<Scope>;

struct Limits {
  size_t max_output_bytes = size_t(64) << 20;
  size_t max_loop_iterations = 5'000'000;  // all loops of one render together
  int max_depth = 1500;                    // nested evaluation frames (macro recursion included)
};

class Interpreter {
 public:
  explicit Interpreter(Limits limits = {}) : limits_(limits) {}
  ~Interpreter();

  std::string render(const Body& program, const ScopePtr& globals);

  enum class Flow { Normal, Break, Continue };
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Value eval(const Expr& e, const ScopePtr& scope);

  // Guards used by the library too (list.append, range, string repetition).
  void check_output(size_t bytes) const;
  void count_iterations(size_t n);
  // Containers a template can mutate, emptied after the render so that reference cycles a
  // template builds (a namespace holding itself) do not outlive it.
  void track(const Value& container) { mutable_.push_back(container); }

 private:
  Limits limits_;
  int depth_ = 0;
  size_t iterations_ = 0;
  std::vector<Value> mutable_;

  struct Frame {
    Interpreter& in;
    explicit Frame(Interpreter& i);
    ~Frame() { --in.depth_; }
  };

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_set(const Expr& target, Value v, const ScopePtr& scope);
  void define_macro(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  void append(std::string& out, const std::string& text) const;

  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_attribute(const Expr& e, const ScopePtr& scope);
  Value eval_index(const Expr& e, const ScopePtr& scope);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const Value& input, const ScopePtr& scope);
  Value apply_filter_chain(const Expr& e, const Value& text, const ScopePtr& scope);
  Value eval_test(const Expr& e, const ScopePtr& scope);
  CallArgs eval_args(const std::vector<Arg>& args, const ScopePtr& scope);
  Value call(const Value& fn, CallArgs& args, const ScopePtr& scope, const Expr& callee);
};

// Binary operators on values (arithmetic, comparison, membership, ~); in operators.cpp.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);

}  // namespace df::jinja
