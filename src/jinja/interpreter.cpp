#include "jinja/interpreter.h"

#include <optional>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/text.h"

namespace df::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

static ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Interpreter::Frame::Frame(Interpreter& i) : in(i) {
  if (++in.depth_ > in.limits_.max_depth) {
    --in.depth_;
    value_error("recursion too deep (more than {} nested evaluations; a macro calling itself?)", in.limits_.max_depth);
  }
}

Interpreter::~Interpreter() {
  for (Value& v : mutable_) {
    if (v.is_array()) v.as_array().clear();
    else if (v.has_attributes()) v.as_object() = Object();
  }
}

std::string Interpreter::render(const Body& program, const ScopePtr& globals) {
  std::string out;
  exec_body(program, globals, out);
  return out;
}

void Interpreter::check_output(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    value_error("output larger than {} bytes", limits_.max_output_bytes);
}

void Interpreter::count_iterations(size_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    value_error("more than {} loop iterations", limits_.max_loop_iterations);
}

void Interpreter::append(std::string& out, const std::string& text) const {
  check_output(out.size() + text.size());
  out += text;
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    Frame frame(*this);
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text); break;
      case Stmt::Kind::Output: append(out, to_output(eval(*s.expr, scope))); break;
      case Stmt::Kind::If:
        return exec_body(eval(*s.expr, scope).truthy() ? s.body : s.else_body, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Set: exec_set(*s.target, eval(*s.expr, scope), scope); break;
      case Stmt::Kind::SetBlock: {
        std::string text;
        exec_body(s.body, scope, text);
        exec_set(*s.target, Value(std::move(text)), scope);
        break;
      }
      case Stmt::Kind::Macro: define_macro(s, scope); break;
      case Stmt::Kind::CallBlock: exec_call_block(s, scope, out); break;
      case Stmt::Kind::FilterBlock: {
        std::string text;
        exec_body(s.body, scope, text);
        append(out, to_output(apply_filter_chain(*s.expr, Value(std::move(text)), scope)));
        break;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  } catch (const ValueError& e) {
    throw TemplateError(e.what(), s.line, s.column, e.raised_by_template());
  }
}

std::vector<Value> iterate(const Value& v, const char* what) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Array: return v.as_array();
    case Value::Kind::Object: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_object().entries()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        text::next_code_point(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default: value_error("{}: a value of type {} is not iterable", what, v.type_name());
  }
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  ScopePtr loop_scope = child_of(scope);
  const Value iterable = eval(*s.expr, loop_scope);
  std::vector<Value> all = iterate(iterable, "for loop");

  std::vector<Value> items;
  if (s.condition) {  // for x in xs if cond: filter first, so loop.index counts kept items
    count_iterations(all.size());
    for (Value& item : all) {
      ScopePtr probe = child_of(loop_scope);
      exec_set(*s.target, item, probe);
      if (eval(*s.condition, probe).truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(all);
  }

  // The else block runs when nothing was iterated; a break in it belongs to an outer loop.
  if (items.empty()) return exec_body(s.else_body, loop_scope, out);
  const int64_t n = int64_t(items.size());
  // loop.cycle(a, b, ...) picks by the current index, which it reads through this shared cell.
  auto index = std::make_shared<int64_t>(0);
  const Value cycle = Value::function("loop.cycle", [index](CallArgs& args, CallContext&) -> Value {
    if (args.positional.empty()) value_error("loop.cycle() needs at least one value");
    return args.positional[size_t(*index) % args.positional.size()];
  });
  for (int64_t i = 0; i < n; ++i) {
    *index = i;
    count_iterations(1);
    Object loop;
    loop.add_new("index", Value(i + 1));
    loop.add_new("index0", Value(i));
    loop.add_new("revindex", Value(n - i));
    loop.add_new("revindex0", Value(n - i - 1));
    loop.add_new("first", Value(i == 0));
    loop.add_new("last", Value(i == n - 1));
    loop.add_new("length", Value(n));
    loop.add_new("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("loop.previtem"));
    loop.add_new("nextitem", i < n - 1 ? items[size_t(i + 1)] : Value::undefined("loop.nextitem"));
    loop.add_new("depth", Value(1));
    loop.add_new("depth0", Value(0));
    loop.add_new("cycle", cycle);
    loop_scope->set("loop", Value(std::move(loop)));
    exec_set(*s.target, items[size_t(i)], loop_scope);
    if (exec_body(s.body, loop_scope, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Expr& target, Value v, const ScopePtr& scope) {
  switch (target.kind) {
    case Expr::Kind::Name: scope->set(target.name, std::move(v)); return;
    case Expr::Kind::Tuple: {
      if (!v.is_array()) value_error("cannot unpack a value of type {} into {} names", v.type_name(), target.items.size());
      const Array& a = v.as_array();
      if (a.size() != target.items.size())
        value_error("cannot unpack {} values into {} names", a.size(), target.items.size());
      for (size_t i = 0; i < a.size(); ++i) exec_set(*target.items[i], a[i], scope);
      return;
    }
    case Expr::Kind::Attribute: {
      const Value ns = eval(*target.a, scope);
      if (!ns.is_namespace())
        value_error("cannot set attribute '{}' on a value of type {}: only a namespace() takes assignments",
                    target.name, ns.type_name());
      ns.as_object().set(target.name, std::move(v));
      return;
    }
    default: value_error("cannot assign to this expression");
  }
}

// Binds call arguments to macro (or caller) parameters, the way @huggingface/jinja does:
// positional first, then by name, then defaults evaluated in the new scope.
static void bind_parameters(Interpreter& in, const Stmt& s, const std::string& display, CallArgs& args,
                            const ScopePtr& scope) {
  std::vector<std::pair<std::string, Value>> keyword = args.keyword;
  std::vector<const Param*> pending;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const Param& p = s.params[i];
    std::optional<Value> v;
    if (i < args.positional.size()) v = args.positional[i];
    if (!v) {
      for (auto it = keyword.begin(); it != keyword.end(); ++it)
        if (it->first == p.name) {
          v = std::move(it->second);
          keyword.erase(it);
          break;
        }
    }
    if (!v && p.default_value) pending.push_back(&p);
    scope->set(p.name, v ? std::move(*v) : Value::undefined(p.name));
  }
  if (s.uses_kwargs) {
    Object kw;
    for (auto& [k, v] : keyword) kw.set(k, v);
    scope->set("kwargs", Value(std::move(kw)));
  } else if (!keyword.empty()) {
    value_error("{} takes no keyword argument '{}'", display, keyword.front().first);
  }
  if (s.uses_varargs) {
    Array rest;
    for (size_t i = s.params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value(std::move(rest)));
  } else if (args.positional.size() > s.params.size()) {
    value_error("{} takes at most {} argument(s), got {}", display, s.params.size(), args.positional.size());
  }
  for (const Param* p : pending) scope->set(p->name, in.eval(*p->default_value, scope));
}

void Interpreter::define_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* node = &s;
  scope->set(s.text, Value::function(s.text, [node](CallArgs& args, CallContext& ctx) -> Value {
    ScopePtr macro_scope = child_of(ctx.scope);
    bind_parameters(ctx.interp, *node, "macro '" + node->text + "'", args, macro_scope);
    std::string out;
    ctx.interp.exec_body(node->body, macro_scope, out);
    return Value(std::move(out));
  }));
}

void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const Stmt* node = &s;
  ScopePtr defined_in = scope;
  Value caller = Value::function("caller", [node, defined_in](CallArgs& args, CallContext& ctx) -> Value {
    ScopePtr body_scope = child_of(defined_in);
    bind_parameters(ctx.interp, *node, "caller", args, body_scope);
    std::string text;
    ctx.interp.exec_body(node->body, body_scope, text);
    return Value(std::move(text));
  });
  const Expr& call_expr = *s.expr;
  CallArgs args = eval_args(call_expr.args, scope);
  const Value fn = eval(*call_expr.a, scope);
  ScopePtr call_scope = child_of(scope);
  call_scope->set("caller", std::move(caller));
  append(out, to_output(call(fn, args, call_scope, *call_expr.a)));
}

// ---- expressions ----

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    Frame frame(*this);
    return eval_inner(e, scope);
  } catch (const ValueError& err) {
    throw TemplateError(err.what(), e.line, e.column, err.raised_by_template());
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Literal: return e.literal;
    case K::Name: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case K::List:
    case K::Tuple: {
      Array a;
      a.reserve(e.items.size());
      for (const auto& item : e.items) a.push_back(eval(*item, scope));
      return Value(std::move(a));
    }
    case K::Dict: {
      Object o;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i], scope);
        if (!key.is_string()) value_error("dict keys must be strings, got {}", key.type_name());
        o.set(key.as_string(), eval(*e.items[i + 1], scope));
      }
      return Value(std::move(o));
    }
    case K::Attribute: return eval_attribute(e, scope);
    case K::Index: return eval_index(e, scope);
    case K::Slice: return eval_slice(e, scope);
    case K::Call: return eval_call(e, scope);
    case K::Filter: return eval_filter(e, eval(*e.a, scope), scope);
    case K::Test: return eval_test(e, scope);
    case K::Unary: return unary_op(e.name, eval(*e.a, scope));
    case K::Binary: return binary_op(e.name, eval(*e.a, scope), eval(*e.b, scope));
    case K::And: {
      Value l = eval(*e.a, scope);
      return l.truthy() ? eval(*e.b, scope) : l;
    }
    case K::Or: {
      Value l = eval(*e.a, scope);
      return l.truthy() ? l : eval(*e.b, scope);
    }
    case K::Not: return Value(!eval(*e.a, scope).truthy());
    case K::Conditional: return eval(*e.b, scope).truthy() ? eval(*e.a, scope) : eval(*e.c, scope);
    case K::Select: return eval(*e.b, scope).truthy() ? eval(*e.a, scope) : Value::undefined();
  }
  return Value::undefined();
}

[[noreturn]] static void undefined_access(const Value& obj, const std::string& what) {
  if (obj.undefined_name().empty()) value_error("cannot read {} of an undefined value", what);
  value_error("cannot read {} of '{}', which is undefined", what, obj.undefined_name());
}

static Value member(const Value& obj, const std::string& name) {
  if (obj.has_attributes())
    if (const Value* v = obj.as_object().find(name)) return *v;
  if (!obj.is_namespace()) {
    Value m = get_method(obj, name);
    if (!m.is_undefined()) return m;
  }
  return Value::undefined(name);
}

Value Interpreter::eval_attribute(const Expr& e, const ScopePtr& scope) {
  const Value obj = eval(*e.a, scope);
  if (obj.is_undefined()) undefined_access(obj, "attribute '" + e.name + "'");
  return member(obj, e.name);
}

// Python indexing of a list or string; out of range is undefined.
static Value index_sequence(const Value& obj, int64_t i) {
  if (obj.is_array()) {
    const Array& a = obj.as_array();
    const int64_t n = int64_t(a.size());
    if (i < 0) i += n;
    return (i >= 0 && i < n) ? a[size_t(i)] : Value::undefined("index " + std::to_string(i));
  }
  const auto cps = text::code_points(obj.as_string());
  const int64_t n = int64_t(cps.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) return Value::undefined("index " + std::to_string(i));
  return Value(text::from_code_points(cps, size_t(i), size_t(i) + 1));
}

Value Interpreter::eval_index(const Expr& e, const ScopePtr& scope) {
  const Value obj = eval(*e.a, scope);
  const Value key = eval(*e.b, scope);
  if (obj.is_undefined()) undefined_access(obj, "item " + to_output(key));
  if (key.is_string()) return member(obj, key.as_string());
  if ((obj.is_array() || obj.is_string()) && key.is_int()) return index_sequence(obj, key.as_int());
  if ((obj.is_array() || obj.is_string()) && !key.is_undefined())
    value_error("{} indices must be integers, got {}", obj.type_name(), key.type_name());
  return Value::undefined();
}

Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
  const Value obj = eval(*e.a, scope);
  if (!obj.is_array() && !obj.is_string()) value_error("cannot slice a value of type {}", obj.type_name());
  auto bound = [&](const ExprPtr& x, const char* what) -> std::optional<int64_t> {
    if (!x) return std::nullopt;
    const Value v = eval(*x, scope);
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) value_error("slice {} must be an integer, got {}", what, v.type_name());
    return v.as_int();
  };
  const auto start = bound(e.b, "start"), stop = bound(e.c, "stop"), step_opt = bound(e.d, "step");
  const int64_t step = step_opt.value_or(1);
  if (step == 0) value_error("slice step cannot be zero");

  std::vector<char32_t> cps;
  const int64_t n = obj.is_array() ? int64_t(obj.as_array().size()) : int64_t((cps = text::code_points(obj.as_string())).size());
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return x < lo ? lo : x > hi ? hi : x;
  };
  int64_t b, en;
  if (step > 0) {
    b = clamp(start, 0, 0, n);
    en = clamp(stop, n, 0, n);
  } else {
    b = clamp(start, n - 1, -1, n - 1);
    en = clamp(stop, -1, -1, n - 1);
  }
  std::vector<int64_t> idx;
  for (int64_t i = b; step > 0 ? i < en : i > en; i += step) idx.push_back(i);
  if (obj.is_array()) {
    Array out;
    for (int64_t i : idx) out.push_back(obj.as_array()[size_t(i)]);
    return Value(std::move(out));
  }
  std::string out;
  for (int64_t i : idx) text::append_utf8(out, cps[size_t(i)]);
  return Value(std::move(out));
}

CallArgs Interpreter::eval_args(const std::vector<Arg>& args, const ScopePtr& scope) {
  CallArgs out;
  for (const Arg& a : args) {  // positional (and *spread) first, as Python does
    if (a.kind == Arg::Kind::Positional) {
      out.positional.push_back(eval(*a.value, scope));
    } else if (a.kind == Arg::Kind::Spread) {
      const Value v = eval(*a.value, scope);
      if (!v.is_array()) value_error("*argument must be a list, got {}", v.type_name());
      for (const Value& item : v.as_array()) out.positional.push_back(item);
    }
  }
  auto add = [&](const std::string& k, Value v) {
    if (out.kwarg(k)) value_error("keyword argument '{}' given twice", k);
    out.keyword.emplace_back(k, std::move(v));
  };
  for (const Arg& a : args) {
    if (a.kind == Arg::Kind::Keyword) {
      add(a.name, eval(*a.value, scope));
    } else if (a.kind == Arg::Kind::KeywordSpread) {
      const Value v = eval(*a.value, scope);
      if (!v.is_object()) value_error("**argument must be a dict, got {}", v.type_name());
      for (const auto& [k, item] : v.as_object().entries()) add(k, item);
    }
  }
  return out;
}

Value Interpreter::call(const Value& fn, CallArgs& args, const ScopePtr& scope, const Expr& callee) {
  if (!fn.is_function()) {
    std::string name = callee.kind == Expr::Kind::Name || callee.kind == Expr::Kind::Attribute ? callee.name : "";
    if (fn.is_undefined()) value_error("'{}' is undefined and cannot be called", name.empty() ? "value" : name);
    value_error("{} is a {}, not a function", name.empty() ? "value" : "'" + name + "'", fn.type_name());
  }
  CallContext ctx{*this, scope};
  return fn.as_function().fn(args, ctx);
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  const Value fn = eval(*e.a, scope);
  CallArgs args = eval_args(e.args, scope);
  return call(fn, args, scope, *e.a);
}

// A {% filter %} block's chain (f|g) ends in null: the block's text goes to the innermost filter.
Value Interpreter::apply_filter_chain(const Expr& e, const Value& text, const ScopePtr& scope) {
  return eval_filter(e, e.a ? apply_filter_chain(*e.a, text, scope) : text, scope);
}

Value Interpreter::eval_filter(const Expr& e, const Value& input, const ScopePtr& scope) {
  CallArgs args = eval_args(e.args, scope);
  CallContext ctx{*this, scope};
  try {
    return apply_filter(e.name, input, args, ctx);
  } catch (const ValueError& err) {
    throw TemplateError(err.what(), e.line, e.column, err.raised_by_template());
  }
}

Value Interpreter::eval_test(const Expr& e, const ScopePtr& scope) {
  const Value operand = eval(*e.a, scope);
  CallArgs args = eval_args(e.args, scope);
  CallContext ctx{*this, scope};
  const bool r = apply_test(e.name, operand, args, ctx);
  return Value(e.negate ? !r : r);
}

}  // namespace df::jinja
