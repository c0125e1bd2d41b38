"""Stand-in for HF tokenizers (CPU dry runs only): byte tokens plus added tokens, no merges."""
import json

__version__ = "0-standin"


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Encoding:
    def __init__(self, ids):
        self.ids = ids


class Tokenizer:
    def __init__(self, j):
        self.vocab = dict(j["model"]["vocab"])
        self.added = {a["content"]: a["id"] for a in j["added_tokens"]}
        self.special = {a["id"] for a in j["added_tokens"] if a["special"]}
        self.inv = {v: k for k, v in self.vocab.items()}
        self.inv.update({v: k for k, v in self.added.items()})
        self.b2u = _bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.byte_ids = [self.vocab[self.b2u[b]] for b in range(256)]

    @staticmethod
    def from_file(path):
        with open(path, encoding="utf-8") as fh:
            return Tokenizer(json.load(fh))

    def _split(self, text):
        out, i, cur = [], 0, []
        keys = sorted(self.added, key=len, reverse=True)
        while i < len(text):
            for k in keys:
                if text.startswith(k, i):
                    if cur:
                        out.append("".join(cur))
                        cur = []
                    out.append(self.added[k])
                    i += len(k)
                    break
            else:
                cur.append(text[i])
                i += 1
        if cur:
            out.append("".join(cur))
        return out

    def encode(self, text, add_special_tokens=False):
        ids = []
        for piece in self._split(text):
            if isinstance(piece, int):
                ids.append(piece)
            else:
                ids.extend(self.byte_ids[b] for b in piece.encode("utf-8"))
        return Encoding(ids)

    def encode_batch(self, texts, add_special_tokens=False):
        return [self.encode(t) for t in texts]

    def token_to_id(self, t):
        return self.added.get(t, self.vocab.get(t))

    def get_vocab_size(self):
        return len(self.vocab) + len(self.added)

    def decode(self, ids, skip_special_tokens=False):
        out, buf = [], bytearray()
        for i in ids:
            t = self.inv.get(int(i), "")
            if int(i) in self.added.values():
                out.append(buf.decode("utf-8", "replace"))
                buf = bytearray()
                if not (skip_special_tokens and int(i) in self.special):
                    out.append(t)
            else:
                buf.extend(self.u2b.get(c, 63) for c in t)
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)
