// SentencePiece behind src/text/tokenizer_spm.h: the library's processor, its
// statuses and exceptions turned into return codes and messages.
#include "tokenizer_spm.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

struct ts_spm {
  sentencepiece::SentencePieceProcessor sp;
  int newline = -1;
};

static void say(char *err, size_t cap, const char *what) {
  if (cap) std::snprintf(err, cap, "%s", what);
}

// Grows a malloc'd array to hold `need` elements of `size` bytes (doubling).
static bool grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  void *q = std::realloc(*p, c * size);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

// f(), or -1 with a message for whatever it throws (nothing may cross into C).
template <class F> static int guarded(char *err, size_t cap, F f) {
  try {
    return f();
  } catch (const std::exception &e) {
    say(err, cap, e.what());
  } catch (...) {
    say(err, cap, "the SentencePiece library failed");
  }
  return -1;
}

extern "C" ts_spm *ts_spm_load(const void *bytes, size_t n, char *err, size_t cap) {
  ts_spm *spm = nullptr;
  const int rc = guarded(err, cap, [&] {
    spm = new ts_spm;
    const auto st =
        spm->sp.LoadFromSerializedProto(std::string_view(static_cast<const char *>(bytes), n));
    if (!st.ok()) {
      // the library names its own source line for bytes that are no model
      std::string why = st.ToString();
      if (why.find("ParseFromArray") != std::string::npos) why = "its bytes do not parse as one";
      return say(err, cap, why.c_str()), -1;
    }
    if (spm->sp.GetPieceSize() < 1) return say(err, cap, "the model has no pieces"), -1;
    // A byte-fallback model spells a line break as the byte 0x0A.
    const int byte = spm->sp.PieceToId("<0x0A>");
    const int piece = spm->sp.PieceToId("\n");
    if (spm->sp.IsByte(byte)) spm->newline = byte;
    else if (!spm->sp.IsUnknown(piece)) spm->newline = piece;
    return 0;
  });
  if (rc == 0) return spm;
  delete spm;
  return nullptr;
}

extern "C" void ts_spm_free(ts_spm *spm) { delete spm; }

extern "C" int ts_spm_vocab(const ts_spm *spm) { return spm->sp.GetPieceSize(); }

extern "C" int ts_spm_newline_id(const ts_spm *spm) { return spm->newline; }

extern "C" int ts_spm_encode(const ts_spm *spm, const char *text, size_t len, int32_t **ids,
                             size_t *n, size_t *cap, char *err, size_t errcap) {
  return guarded(err, errcap, [&] {
    std::vector<int> out;
    const auto st = spm->sp.Encode(std::string_view(text, len), &out);
    if (!st.ok()) return say(err, errcap, st.ToString().c_str()), -1;
    if (!grow(reinterpret_cast<void **>(ids), cap, *n + out.size(), sizeof **ids))
      return say(err, errcap, "out of memory"), -1;
    for (int id : out) (*ids)[(*n)++] = id;
    return 0;
  });
}

extern "C" int ts_spm_decode(const ts_spm *spm, const int32_t *ids, size_t n, char **text,
                             size_t *len, size_t *cap, char *err, size_t errcap) {
  return guarded(err, errcap, [&] {
    const std::vector<int> in(ids, ids + n);
    std::string out;
    const auto st = spm->sp.Decode(in, &out);
    if (!st.ok()) return say(err, errcap, st.ToString().c_str()), -1;
    if (!grow(reinterpret_cast<void **>(text), cap, *len + out.size() + 1, 1))
      return say(err, errcap, "out of memory"), -1;
    std::memcpy(*text + *len, out.data(), out.size());
    *len += out.size();
    (*text)[*len] = 0;
    return 0;
  });
}
