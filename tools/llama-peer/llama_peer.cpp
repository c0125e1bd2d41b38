// llama-peer: deltaflash's command-line harness around the prebuilt llama.cpp
// libraries shipped by node-llama-cpp 3.21.1 (libllama v0.4.0, CPU only).
// It is our test oracle and benchmark peer; see README.md in this directory.
//
// Every subcommand writes machine-readable results (JSON on stdout, or raw
// binary files); diagnostics and llama.cpp warnings go to stderr.
// Exit status: 0 success, 1 runtime failure, 2 usage error.

#include <ggml-backend.h>
#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <link.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---------------------------------------------------------------------------
// Errors

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char * fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw std::runtime_error(buf);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void usage_fail(const char * fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw UsageError(buf);
}

const char * const kUsage =
    "usage: llama-peer <command> [args]\n"
    "  logits     MODEL --tokens IDS --out FILE [--batch N] [--threads T] [--ctx N]\n"
    "             [--flash auto|on|off] [--kv-type f16|f32|bf16|q8_0]\n"
    "  greedy     MODEL --tokens IDS -n N [--batch N] [--threads T] [--ctx N] [--stop-eog]\n"
    "             [--flash auto|on|off] [--kv-type ...]\n"
    "  tokenize   MODEL (--text T | --text-file F) [--no-special]\n"
    "  detokenize MODEL --tokens IDS\n"
    "  quantize   IN.gguf OUT.gguf TYPE [--threads T] [--pure] [--allow-requantize]\n"
    "  quantize-row TYPE IN.f32 OUT.bin N_PER_ROW\n"
    "  dequant    TYPE IN.bin OUT.f32 N_ELEMENTS\n"
    "  info       [MODEL]\n"
    "  types\n"
    "IDS: integers separated by commas/whitespace (a JSON array works too);\n"
    "     --tokens-file F reads them from a file instead of --tokens.\n"
    "Add --verbose to any command to see llama.cpp's info log on stderr.\n";

// ---------------------------------------------------------------------------
// Logging: keep every llama.cpp/ggml log line (to find out what llama.cpp
// resolved, e.g. flash attention), echo warnings and errors to stderr.

struct LogState {
    bool verbose = false;
    ggml_log_level last = GGML_LOG_LEVEL_INFO;  // level that a CONT message continues
    std::string text;
};
LogState g_log;

void log_callback(ggml_log_level level, const char * text, void *) {
    if (level != GGML_LOG_LEVEL_CONT) g_log.last = level;
    g_log.text += text;
    if (g_log.verbose || g_log.last >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

bool log_contains(const char * needle) { return g_log.text.find(needle) != std::string::npos; }

// ---------------------------------------------------------------------------
// Small utilities

std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\r': o += "\\r"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char b[8];
                    snprintf(b, sizeof b, "\\u%04x", c);
                    o += b;
                } else {
                    o += char(c);
                }
        }
    }
    return o + "\"";
}

std::string json_ids(const std::vector<llama_token> & ids) {
    std::string o = "[";
    for (size_t i = 0; i < ids.size(); ++i) o += (i ? "," : "") + std::to_string(ids[i]);
    return o + "]";
}

std::string lower(std::string s) {
    for (char & c : s) c = char(std::tolower((unsigned char) c));
    return s;
}

int64_t parse_int(const std::string & s, const char * what, int64_t lo, int64_t hi) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) usage_fail("%s: '%s' is not an integer", what, s.c_str());
    if (v < lo || v > hi) usage_fail("%s: %lld is out of range [%lld, %lld]", what, (long long) v, (long long) lo, (long long) hi);
    return v;
}

// Integers separated by commas, whitespace or JSON brackets.
std::vector<llama_token> parse_ids(const std::string & s) {
    std::vector<llama_token> ids;
    size_t i = 0;
    while (i < s.size()) {
        char c = s[i];
        if (c == ',' || c == '[' || c == ']' || std::isspace((unsigned char) c)) { ++i; continue; }
        size_t j = i + (c == '-');
        while (j < s.size() && std::isdigit((unsigned char) s[j])) ++j;
        if (j == i || (c == '-' && j == i + 1)) usage_fail("token list: unexpected character '%c' at offset %zu", c, i);
        ids.push_back(llama_token(parse_int(s.substr(i, j - i), "token id", INT32_MIN, INT32_MAX)));
        i = j;
    }
    return ids;
}

std::vector<char> read_file(const std::string & path) {
    FILE * f = fopen(path.c_str(), "rb");
    if (!f) fail("cannot open '%s': %s", path.c_str(), strerror(errno));
    std::vector<char> data;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
    bool err = ferror(f);
    fclose(f);
    if (err) fail("error reading '%s'", path.c_str());
    return data;
}

void write_file(const std::string & path, const void * data, size_t size) {
    FILE * f = fopen(path.c_str(), "wb");
    if (!f) fail("cannot create '%s': %s", path.c_str(), strerror(errno));
    bool ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok) fail("error writing '%s'", path.c_str());
}

// ---------------------------------------------------------------------------
// Command-line options: positionals, "--key value" options and boolean flags.

struct Args {
    std::vector<std::string> pos;
    std::map<std::string, std::string> opt;
    std::set<std::string> flags;

    bool has(const std::string & k) const { return opt.count(k) || flags.count(k); }
    std::string get(const std::string & k, const std::string & def = "") const {
        auto it = opt.find(k);
        return it == opt.end() ? def : it->second;
    }
    int64_t get_int(const std::string & k, int64_t def, int64_t lo, int64_t hi) const {
        return opt.count(k) ? parse_int(opt.at(k), k.c_str(), lo, hi) : def;
    }
};

Args parse_args(int argc, char ** argv, const std::set<std::string> & valued, const std::set<std::string> & boolean,
                size_t n_pos) {
    Args a;
    for (int i = 2; i < argc; ++i) {
        std::string s = argv[i];
        if (s == "--verbose") {
            g_log.verbose = true;
        } else if (valued.count(s)) {
            if (i + 1 >= argc) usage_fail("option %s needs a value", s.c_str());
            a.opt[s] = argv[++i];
        } else if (boolean.count(s)) {
            a.flags.insert(s);
        } else if (s.size() > 1 && s[0] == '-' && !std::isdigit((unsigned char) s[1])) {
            usage_fail("unknown option '%s' for '%s'", s.c_str(), argv[1]);
        } else {
            a.pos.push_back(s);
        }
    }
    if (a.pos.size() != n_pos)
        usage_fail("'%s' takes %zu positional argument(s), got %zu", argv[1], n_pos, a.pos.size());
    return a;
}

std::vector<llama_token> token_arg(const Args & a) {
    if (a.has("--tokens") == a.has("--tokens-file")) usage_fail("give exactly one of --tokens or --tokens-file");
    std::string s = a.get("--tokens");
    if (a.has("--tokens-file")) {
        auto d = read_file(a.get("--tokens-file"));
        s.assign(d.begin(), d.end());
    }
    auto ids = parse_ids(s);
    if (ids.empty()) usage_fail("empty token list");
    return ids;
}

// ---------------------------------------------------------------------------
// Backends and models

// Directory of the loaded libllama: the CPU backend variants
// (libggml-cpu-<arch>.so) sit next to it and are loaded from there.
std::string llama_lib_dir() {
    std::string found;
    dl_iterate_phdr(
        [](dl_phdr_info * info, size_t, void * out) -> int {
            std::filesystem::path p = info->dlpi_name ? info->dlpi_name : "";
            if (p.filename().string().rfind("libllama", 0) == 0) {
                *static_cast<std::string *>(out) = std::filesystem::weakly_canonical(p).parent_path().string();
                return 1;
            }
            return 0;
        },
        &found);
    if (found.empty()) fail("cannot locate the loaded libllama shared library");
    return found;
}

void init_backends() {
    llama_log_set(log_callback, nullptr);
    std::string dir = llama_lib_dir();
    ggml_backend_load_all_from_path(dir.c_str());
    llama_backend_init();
    if (ggml_backend_dev_count() == 0) fail("no ggml backend could be loaded from '%s'", dir.c_str());
}

struct ModelPtr {
    llama_model * m = nullptr;
    ~ModelPtr() { if (m) llama_model_free(m); }
};
struct CtxPtr {
    llama_context * c = nullptr;
    ~CtxPtr() { if (c) llama_free(c); }
};

void load_model(ModelPtr & mp, const std::string & path, bool vocab_only) {
    if (!std::filesystem::exists(path)) fail("model file '%s' does not exist", path.c_str());
    llama_model_params p = llama_model_default_params();
    p.vocab_only = vocab_only;
    p.n_gpu_layers = 0;
    mp.m = llama_model_load_from_file(path.c_str(), p);
    if (!mp.m) fail("failed to load model '%s' (see llama.cpp log above)", path.c_str());
}

const llama_vocab * vocab_of(const ModelPtr & mp) { return llama_model_get_vocab(mp.m); }

void check_ids(const ModelPtr & mp, const std::vector<llama_token> & ids) {
    int32_t n_vocab = llama_vocab_n_tokens(vocab_of(mp));
    for (llama_token t : ids)
        if (t < 0 || t >= n_vocab) fail("token id %d out of range [0, %d)", t, n_vocab);
}

// ggml type by name (as ggml_type_name prints it, case-insensitive).
ggml_type parse_ggml_type(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name(ggml_type(t));
        if (n && ggml_blck_size(ggml_type(t)) > 0 && lower(n) == lower(name)) return ggml_type(t);
    }
    usage_fail("unknown ggml type '%s' (see 'llama-peer types')", name.c_str());
}

// Types ggml_quantize_chunk can produce (it aborts on others): the float types
// and every block type except the activation-only q8_1 / q8_K.
bool row_quantizable(ggml_type t) {
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) return true;
    return ggml_get_type_traits(t)->is_quantized && t != GGML_TYPE_Q8_1 && t != GGML_TYPE_Q8_K;
}

// ---------------------------------------------------------------------------
// Evaluation (logits, greedy)

struct EvalSetup {
    int batch = 0;  // tokens per llama_decode call; 0 = all prompt tokens at once
    int threads = 0;
    int ctx = 0;
    llama_flash_attn_type flash = LLAMA_FLASH_ATTN_TYPE_AUTO;  // llama.cpp default
    ggml_type kv_type = GGML_TYPE_F16;                           // llama.cpp default
};

EvalSetup eval_setup(const Args & a) {
    EvalSetup s;
    s.batch = int(a.get_int("--batch", 0, 1, 1 << 20));
    s.threads = int(a.get_int("--threads", std::max(1u, std::thread::hardware_concurrency()), 1, 1024));
    s.ctx = int(a.get_int("--ctx", 0, 1, 1 << 24));
    std::string fa = a.get("--flash", "auto");
    if (fa == "auto") s.flash = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else if (fa == "on") s.flash = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (fa == "off") s.flash = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else usage_fail("--flash must be auto, on or off");
    if (a.has("--kv-type")) s.kv_type = parse_ggml_type(a.get("--kv-type"));
    return s;
}

// Reads how llama.cpp resolved its "auto" choices from the captured log.
std::string resolved(const char * op_name, bool requested_auto, bool requested_on) {
    if (!requested_auto) return requested_on ? "enabled" : "disabled";
    std::string on = std::string(op_name) + " enabled", off = std::string(op_name) + " not supported";
    if (log_contains(on.c_str())) return "enabled";
    if (log_contains(off.c_str())) return "disabled";
    return "unknown";
}

struct Evaluator {
    CtxPtr ctx;
    int n_vocab = 0;
    int batch = 0;
    std::string settings_json;  // what was used, for the JSON summary

    Evaluator(const ModelPtr & mp, const EvalSetup & s, int n_total, int n_prompt) {
        n_vocab = llama_vocab_n_tokens(vocab_of(mp));
        batch = s.batch > 0 ? s.batch : n_prompt;
        if (s.ctx > 0 && s.ctx < n_total) fail("--ctx %d is smaller than the %d tokens to evaluate", s.ctx, n_total);
        llama_context_params p = llama_context_default_params();
        p.n_ctx = uint32_t(s.ctx > 0 ? s.ctx : n_total);  // llama.cpp pads this up to a multiple of 256
        p.n_batch = p.n_ubatch = uint32_t(batch);            // one graph per llama_decode call
        p.n_seq_max = 1;
        p.n_threads = p.n_threads_batch = s.threads;
        p.flash_attn_type = s.flash;
        p.type_k = p.type_v = s.kv_type;
        p.no_perf = true;
        ctx.c = llama_init_from_model(mp.m, p);
        if (!ctx.c) fail("failed to create llama context (see llama.cpp log above)");

        bool fa_auto = s.flash == LLAMA_FLASH_ATTN_TYPE_AUTO, fa_on = s.flash == LLAMA_FLASH_ATTN_TYPE_ENABLED;
        std::string fa = resolved("Flash Attention", fa_auto, fa_on);
        fprintf(stderr,
                "llama-peer: n_ctx=%u n_batch=n_ubatch=%d threads=%d flash_attn=%s(%s) type_k=type_v=%s\n",
                llama_n_ctx(ctx.c), batch, s.threads, llama_flash_attn_type_name(s.flash), fa.c_str(),
                ggml_type_name(s.kv_type));
        settings_json = "\"n_ctx\":" + std::to_string(llama_n_ctx(ctx.c)) + ",\"batch\":" + std::to_string(batch) +
                        ",\"threads\":" + std::to_string(s.threads) +
                        ",\"flash_attn\":" + json_str(llama_flash_attn_type_name(s.flash)) +
                        ",\"flash_attn_resolved\":" + json_str(fa) + ",\"type_k\":" + json_str(ggml_type_name(s.kv_type)) +
                        ",\"type_v\":" + json_str(ggml_type_name(s.kv_type));
    }

    // Evaluates `toks` at positions pos0.. in llama_decode calls of at most
    // `chunk` tokens (sequence 0). on_logits(i, row) is called for every
    // position i (index into toks) if all_logits, else only for the last one.
    void eval(const std::vector<llama_token> & toks, int pos0, int chunk, bool all_logits,
              const std::function<void(size_t, const float *)> & on_logits) {
        llama_batch b = llama_batch_init(chunk, 0, 1);
        struct Free { llama_batch & b; ~Free() { llama_batch_free(b); } } guard{b};
        for (size_t start = 0; start < toks.size(); start += size_t(chunk)) {
            size_t n = std::min(toks.size() - start, size_t(chunk));
            b.n_tokens = int32_t(n);
            for (size_t j = 0; j < n; ++j) {
                b.token[j] = toks[start + j];
                b.pos[j] = llama_pos(pos0 + start + j);
                b.n_seq_id[j] = 1;
                b.seq_id[j][0] = 0;
                b.logits[j] = all_logits || start + j + 1 == toks.size();
            }
            int rc = llama_decode(ctx.c, b);
            if (rc != 0) fail("llama_decode failed (rc=%d) at tokens [%zu, %zu)", rc, start, start + n);
            for (size_t j = 0; j < n; ++j) {
                if (!b.logits[j]) continue;
                const float * row = llama_get_logits_ith(ctx.c, int32_t(j));
                if (!row) fail("no logits for position %zu", start + j);
                on_logits(start + j, row);
            }
        }
    }
};

int cmd_logits(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {"--tokens", "--tokens-file", "--batch", "--threads", "--ctx", "--out", "--flash", "--kv-type"},
                        {}, 1);
    if (!a.has("--out")) usage_fail("logits: --out FILE is required");
    auto toks = token_arg(a);
    EvalSetup s = eval_setup(a);
    init_backends();
    ModelPtr mp;
    load_model(mp, a.pos[0], false);
    check_ids(mp, toks);
    Evaluator ev(mp, s, int(toks.size()), int(toks.size()));

    std::string out = a.get("--out");
    FILE * f = fopen(out.c_str(), "wb");
    if (!f) fail("cannot create '%s': %s", out.c_str(), strerror(errno));
    size_t n_nonfinite = 0, next = 0;
    bool ok = true;
    ev.eval(toks, 0, ev.batch, true, [&](size_t i, const float * row) {
        if (i != next++) fail("internal error: logits out of order");
        for (int k = 0; k < ev.n_vocab; ++k) n_nonfinite += !std::isfinite(row[k]);
        ok = ok && fwrite(row, sizeof(float), size_t(ev.n_vocab), f) == size_t(ev.n_vocab);
    });
    ok = (fclose(f) == 0) && ok;
    if (!ok) fail("error writing '%s'", out.c_str());
    if (n_nonfinite) fprintf(stderr, "llama-peer: warning: %zu non-finite logits\n", n_nonfinite);
    printf("{\"out\":%s,\"n_tokens\":%zu,\"n_vocab\":%d,\"dtype\":\"f32le\",%s,\"n_nonfinite\":%zu}\n",
           json_str(out).c_str(), toks.size(), ev.n_vocab, ev.settings_json.c_str(), n_nonfinite);
    return 0;
}

int cmd_greedy(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {"--tokens", "--tokens-file", "-n", "--batch", "--threads", "--ctx", "--flash", "--kv-type"},
                        {"--stop-eog"}, 1);
    if (!a.has("-n")) usage_fail("greedy: -n N is required");
    auto toks = token_arg(a);
    int n_gen = int(a.get_int("-n", 0, 0, 1 << 24));
    EvalSetup s = eval_setup(a);
    init_backends();
    ModelPtr mp;
    load_model(mp, a.pos[0], false);
    check_ids(mp, toks);
    Evaluator ev(mp, s, int(toks.size()) + n_gen, int(toks.size()));

    // argmax of the raw logits; ties go to the lowest id.
    std::vector<llama_token> out;
    llama_token next = -1;
    auto pick = [&](size_t, const float * row) {
        int best = 0;
        for (int k = 0; k < ev.n_vocab; ++k) {
            if (std::isnan(row[k])) fail("NaN logit at id %d", k);
            if (row[k] > row[best]) best = k;
        }
        next = best;
    };
    ev.eval(toks, 0, ev.batch, false, pick);
    int pos = int(toks.size());
    for (int i = 0; i < n_gen; ++i) {
        out.push_back(next);
        if (a.flags.count("--stop-eog") && llama_vocab_is_eog(vocab_of(mp), next)) break;
        if (i + 1 < n_gen) ev.eval({next}, pos++, 1, false, pick);
    }
    printf("%s\n", json_ids(out).c_str());
    return 0;
}

int cmd_tokenize(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {"--text", "--text-file"}, {"--no-special"}, 1);
    if (a.has("--text") == a.has("--text-file")) usage_fail("tokenize: give exactly one of --text or --text-file");
    std::string text = a.get("--text");
    if (a.has("--text-file")) {
        auto d = read_file(a.get("--text-file"));
        text.assign(d.begin(), d.end());
    }
    if (text.size() > size_t(INT32_MAX)) fail("text too long");
    init_backends();
    ModelPtr mp;
    load_model(mp, a.pos[0], true);
    bool parse_special = !a.flags.count("--no-special");
    std::vector<llama_token> ids(text.size() + 16);
    for (int attempt = 0; attempt < 2; ++attempt) {
        int32_t n = llama_tokenize(vocab_of(mp), text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()),
                                   /*add_special=*/false, parse_special);
        if (n == INT32_MIN) fail("llama_tokenize overflow");
        if (n >= 0) {
            ids.resize(size_t(n));
            printf("%s\n", json_ids(ids).c_str());
            return 0;
        }
        ids.resize(size_t(-n));
    }
    fail("llama_tokenize failed");
}

int cmd_detokenize(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {"--tokens", "--tokens-file"}, {}, 1);
    auto toks = token_arg(a);
    init_backends();
    ModelPtr mp;
    load_model(mp, a.pos[0], true);
    check_ids(mp, toks);
    std::vector<char> buf(toks.size() * 16 + 64);
    for (int attempt = 0; attempt < 2; ++attempt) {
        int32_t n = llama_detokenize(vocab_of(mp), toks.data(), int32_t(toks.size()), buf.data(), int32_t(buf.size()),
                                     /*remove_special=*/false, /*unparse_special=*/true);
        if (n >= 0) {
            fwrite(buf.data(), 1, size_t(n), stdout);
            return 0;
        }
        buf.resize(size_t(-n));
    }
    fail("llama_detokenize failed");
}

// File types accepted by llama_model_quantize (names as llama-quantize prints
// them, lower-case); q2_k_s/iq2_*/iq1_*/iq3_xxs need an imatrix for most tensors.
const std::vector<std::pair<const char *, llama_ftype>> kFtypes = {
    {"f32", LLAMA_FTYPE_ALL_F32},          {"f16", LLAMA_FTYPE_MOSTLY_F16},         {"bf16", LLAMA_FTYPE_MOSTLY_BF16},
    {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},       {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},     {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},       {"q2_k", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"q2_k_s", LLAMA_FTYPE_MOSTLY_Q2_K_S}, {"q3_k", LLAMA_FTYPE_MOSTLY_Q3_K_M},     {"q3_k_s", LLAMA_FTYPE_MOSTLY_Q3_K_S},
    {"q3_k_m", LLAMA_FTYPE_MOSTLY_Q3_K_M}, {"q3_k_l", LLAMA_FTYPE_MOSTLY_Q3_K_L},   {"q4_k", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"q4_k_s", LLAMA_FTYPE_MOSTLY_Q4_K_S}, {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M},   {"q5_k", LLAMA_FTYPE_MOSTLY_Q5_K_M},
    {"q5_k_s", LLAMA_FTYPE_MOSTLY_Q5_K_S}, {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M},   {"q6_k", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"iq1_s", LLAMA_FTYPE_MOSTLY_IQ1_S},   {"iq1_m", LLAMA_FTYPE_MOSTLY_IQ1_M},     {"iq2_xxs", LLAMA_FTYPE_MOSTLY_IQ2_XXS},
    {"iq2_xs", LLAMA_FTYPE_MOSTLY_IQ2_XS}, {"iq2_s", LLAMA_FTYPE_MOSTLY_IQ2_S},     {"iq2_m", LLAMA_FTYPE_MOSTLY_IQ2_M},
    {"iq3_xxs", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"iq3_xs", LLAMA_FTYPE_MOSTLY_IQ3_XS}, {"iq3_s", LLAMA_FTYPE_MOSTLY_IQ3_S},
    {"iq3_m", LLAMA_FTYPE_MOSTLY_IQ3_M},   {"iq4_nl", LLAMA_FTYPE_MOSTLY_IQ4_NL},   {"iq4_xs", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    {"tq1_0", LLAMA_FTYPE_MOSTLY_TQ1_0},   {"tq2_0", LLAMA_FTYPE_MOSTLY_TQ2_0},     {"mxfp4_moe", LLAMA_FTYPE_MOSTLY_MXFP4_MOE},
};

// {"q8_0": 12, "f32": 9} style summary of a GGUF's tensor types.
std::string tensor_type_counts(const std::string & path) {
    gguf_init_params gp = {/*no_alloc=*/true, /*ctx=*/nullptr};
    gguf_context * g = gguf_init_from_file(path.c_str(), gp);
    if (!g) fail("cannot read GGUF '%s'", path.c_str());
    std::map<std::string, int> counts;
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) counts[ggml_type_name(gguf_get_tensor_type(g, i))]++;
    gguf_free(g);
    std::string o = "{";
    for (auto & [k, v] : counts) o += (o.size() > 1 ? "," : "") + json_str(k) + ":" + std::to_string(v);
    return o + "}";
}

int cmd_quantize(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {"--threads"}, {"--pure", "--allow-requantize"}, 3);
    const std::string &in = a.pos[0], &out = a.pos[1], name = lower(a.pos[2]);
    auto it = std::find_if(kFtypes.begin(), kFtypes.end(), [&](auto & e) { return name == e.first; });
    if (it == kFtypes.end()) {
        std::string names;
        for (auto & e : kFtypes) names += std::string(names.empty() ? "" : " ") + e.first;
        usage_fail("unknown quantization type '%s'; known: %s", a.pos[2].c_str(), names.c_str());
    }
    if (!std::filesystem::exists(in)) fail("input '%s' does not exist", in.c_str());
    init_backends();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = it->second;
    p.nthread = int32_t(a.get_int("--threads", 0, 0, 1024));  // 0 = all cores
    p.pure = a.flags.count("--pure") > 0;
    p.allow_requantize = a.flags.count("--allow-requantize") > 0;
    if (llama_model_quantize(in.c_str(), out.c_str(), &p) != 0) {
        std::error_code ec;
        std::filesystem::remove(out, ec);  // do not leave a partial file behind
        fail("llama_model_quantize to %s failed (see llama.cpp log above)", it->first);
    }
    printf("{\"in\":%s,\"out\":%s,\"type\":%s,\"ftype\":%d,\"ftype_name\":%s,\"in_bytes\":%ju,\"out_bytes\":%ju,"
           "\"tensor_types\":%s}\n",
           json_str(in).c_str(), json_str(out).c_str(), json_str(it->first).c_str(), int(it->second),
           json_str(llama_ftype_name(it->second)).c_str(), uintmax_t(std::filesystem::file_size(in)),
           uintmax_t(std::filesystem::file_size(out)), tensor_type_counts(out).c_str());
    return 0;
}

int cmd_quantize_row(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {}, {}, 4);
    ggml_type type = parse_ggml_type(a.pos[0]);
    int64_t n_per_row = parse_int(a.pos[3], "N_PER_ROW", 1, INT64_MAX);
    if (n_per_row % ggml_blck_size(type))
        fail("N_PER_ROW %lld is not a multiple of the %s block size %lld", (long long) n_per_row, ggml_type_name(type),
             (long long) ggml_blck_size(type));
    if (!row_quantizable(type)) fail("ggml_quantize_chunk cannot produce %s", ggml_type_name(type));
    if (ggml_quantize_requires_imatrix(type)) fail("%s requires an importance matrix; not supported here", ggml_type_name(type));
    auto raw = read_file(a.pos[1]);
    if (raw.size() % (sizeof(float) * size_t(n_per_row)))
        fail("'%s' holds %zu bytes, not a whole number of rows of %lld floats", a.pos[1].c_str(), raw.size(),
             (long long) n_per_row);
    int64_t nrows = int64_t(raw.size() / sizeof(float)) / n_per_row;
    std::vector<float> src(raw.size() / sizeof(float));
    memcpy(src.data(), raw.data(), raw.size());
    std::vector<uint8_t> dst(ggml_row_size(type, n_per_row) * size_t(nrows));
    size_t n = ggml_quantize_chunk(type, src.data(), dst.data(), 0, nrows, n_per_row, nullptr);
    if (n != dst.size()) fail("ggml_quantize_chunk wrote %zu bytes, expected %zu", n, dst.size());
    write_file(a.pos[2], dst.data(), dst.size());
    printf("{\"type\":%s,\"rows\":%lld,\"n_per_row\":%lld,\"bytes\":%zu,\"out\":%s}\n", json_str(ggml_type_name(type)).c_str(),
           (long long) nrows, (long long) n_per_row, dst.size(), json_str(a.pos[2]).c_str());
    return 0;
}

int cmd_dequant(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {}, {}, 4);
    ggml_type type = parse_ggml_type(a.pos[0]);
    int64_t n = parse_int(a.pos[3], "N_ELEMENTS", 1, INT64_MAX);
    if (n % ggml_blck_size(type))
        fail("N_ELEMENTS %lld is not a multiple of the %s block size %lld", (long long) n, ggml_type_name(type),
             (long long) ggml_blck_size(type));
    auto raw = read_file(a.pos[1]);
    size_t want = ggml_row_size(type, n);
    if (raw.size() != want) fail("'%s' holds %zu bytes; %lld %s elements need %zu", a.pos[1].c_str(), raw.size(), (long long) n,
                                 ggml_type_name(type), want);
    std::vector<float> dst(static_cast<size_t>(n));
    const ggml_type_traits * tr = ggml_get_type_traits(type);
    if (type == GGML_TYPE_F32) memcpy(dst.data(), raw.data(), raw.size());
    else if (tr->to_float) tr->to_float(raw.data(), dst.data(), n);
    else fail("ggml has no dequantization for %s", ggml_type_name(type));
    write_file(a.pos[2], dst.data(), dst.size() * sizeof(float));
    printf("{\"type\":%s,\"n_elements\":%lld,\"out\":%s}\n", json_str(ggml_type_name(type)).c_str(), (long long) n,
           json_str(a.pos[2]).c_str());
    return 0;
}

int cmd_types(int argc, char ** argv) {
    parse_args(argc, argv, {}, {}, 0);
    std::string o = "[";
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name(ggml_type(t));
        if (!n || ggml_blck_size(ggml_type(t)) <= 0) continue;
        const ggml_type_traits * tr = ggml_get_type_traits(ggml_type(t));
        o += std::string(o.size() > 1 ? "," : "") + "{\"id\":" + std::to_string(t) + ",\"name\":" + json_str(n) +
             ",\"block\":" + std::to_string(ggml_blck_size(ggml_type(t))) +
             ",\"block_bytes\":" + std::to_string(ggml_type_size(ggml_type(t))) +
             ",\"quantized\":" + (tr->is_quantized ? "true" : "false") +
             ",\"quantize_row\":" + (row_quantizable(ggml_type(t)) ? "true" : "false") +
             ",\"dequant\":" + ((tr->to_float || t == GGML_TYPE_F32) ? "true" : "false") +
             ",\"requires_imatrix\":" + (ggml_quantize_requires_imatrix(ggml_type(t)) ? "true" : "false") + "}";
    }
    printf("%s]\n", o.c_str());
    return 0;
}

int cmd_info(int argc, char ** argv) {
    Args a = parse_args(argc, argv, {}, {}, argc > 2 && argv[2][0] != '-' ? 1 : 0);
    init_backends();
    std::string devs = "[";
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        devs += std::string(i ? "," : "") + "{\"name\":" + json_str(ggml_backend_dev_name(d)) +
                ",\"description\":" + json_str(ggml_backend_dev_description(d)) + "}";
    }
    devs += "]";
    // Which CPU variant library the loader picked (it logs the path).
    std::string variant;
    size_t at = g_log.text.find("libggml-cpu-");
    if (at != std::string::npos) variant = g_log.text.substr(at, g_log.text.find_first_of(".\n", at) - at);
    printf("{\"llama_version\":%s,\"ggml_version\":%s,\"ggml_commit\":%s,\"lib_dir\":%s,\"cpu_variant\":%s,"
           "\"devices\":%s,\"system_info\":%s",
           json_str(llama_version()).c_str(), json_str(ggml_version()).c_str(), json_str(ggml_commit()).c_str(),
           json_str(llama_lib_dir()).c_str(), json_str(variant).c_str(), devs.c_str(),
           json_str(llama_print_system_info()).c_str());
    if (!a.pos.empty()) {
        ModelPtr mp;
        load_model(mp, a.pos[0], false);
        char desc[256] = "", arch[128] = "";
        llama_model_desc(mp.m, desc, sizeof desc);
        llama_model_meta_val_str(mp.m, "general.architecture", arch, sizeof arch);
        printf(",\"model\":{\"path\":%s,\"arch\":%s,\"desc\":%s,\"n_params\":%ju,\"size_bytes\":%ju,\"n_vocab\":%d,"
               "\"hybrid\":%s,\"recurrent\":%s}",
               json_str(a.pos[0]).c_str(), json_str(arch).c_str(), json_str(desc).c_str(), uintmax_t(llama_model_n_params(mp.m)),
               uintmax_t(llama_model_size(mp.m)), llama_vocab_n_tokens(vocab_of(mp)), llama_model_is_hybrid(mp.m) ? "true" : "false",
               llama_model_is_recurrent(mp.m) ? "true" : "false");
    }
    printf("}\n");
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    const std::map<std::string, int (*)(int, char **)> commands = {
        {"logits", cmd_logits},         {"greedy", cmd_greedy},   {"tokenize", cmd_tokenize},
        {"detokenize", cmd_detokenize}, {"quantize", cmd_quantize}, {"quantize-row", cmd_quantize_row},
        {"dequant", cmd_dequant},       {"info", cmd_info},       {"types", cmd_types},
    };
    if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
        fputs(kUsage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    auto it = commands.find(argv[1]);
    try {
        if (it == commands.end()) usage_fail("unknown command '%s'", argv[1]);
        int rc = it->second(argc, argv);
        if (fflush(stdout) != 0) fail("error writing to stdout");
        return rc;
    } catch (const UsageError & e) {
        fprintf(stderr, "llama-peer: %s\n\n%s", e.what(), kUsage);
        return 2;
    } catch (const std::exception & e) {
        fprintf(stderr, "llama-peer: error: %s\n", e.what());
        return 1;
    }
}
