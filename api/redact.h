/* redact: write keys cut out of the bytes the quarantine keeps for operators. */
#ifndef INGESTD_API_REDACT_H
#define INGESTD_API_REDACT_H

#include <stddef.h>

/* What a write key's value becomes (a JSON string's content: no quote or backslash in it). */
#define REDACT_MARK "[redacted]"

/*
 * Textual redaction, so it also covers bytes that are not JSON (a body that failed to parse, cut
 * at the quarantine's cap, even inside the key): at every '"' of s[0..len), a JSON string whose
 * content reads "writeKey" (its letters written plainly or as \u escapes), then optional blanks,
 * ':', blanks and '"', starts a value; its bytes up to the next unescaped '"' (or the end of s)
 * become REDACT_MARK. Every such member is redacted, at any depth, whether or not the text
 * around it is valid. Returns 0 with *out NULL when s holds none (use s as it is), 0 with *out a
 * malloc'ed copy (the caller frees) of *out_len bytes, or -1 when out of memory. Thread-safe.
 */
int redact_write_keys(const char *s, size_t len, char **out, size_t *out_len);

/*
 * The first writeKey value in s[0..len) as redact_write_keys finds it: its bytes as written
 * (escapes not decoded; cut short when s ends inside it), borrowed from s, and *klen; NULL when
 * there is none or it is empty. Thread-safe.
 */
const char *redact_find_write_key(const char *s, size_t len, size_t *klen);

#endif
