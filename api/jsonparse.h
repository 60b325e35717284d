/* jsonparse: a fast JSON parser for the common case, building the tree json_loadb would build. */
#ifndef INGESTD_API_JSONPARSE_H
#define INGESTD_API_JSONPARSE_H

#include <jansson.h>
#include <stddef.h>

/*
 * Parses s[0..len) as one JSON value followed only by whitespace and returns the same tree
 * json_loadb(s, len, JSON_DECODE_ANY, ...) returns (same values, same member order, a repeated
 * key keeps its first position and its last value); the caller owns it (json_decref).
 *
 * It accepts a subset of what json_loadb accepts and never anything json_loadb rejects. NULL
 * means "not decided here": the text is invalid, or outside the subset (nesting deeper than
 * JSONPARSE_MAX_DEPTH, integers of more than 18 digits, reals of more than 63 characters),
 * or memory ran out. The caller then runs json_loadb, which decides and words the error.
 * Thread-safe.
 */
#define JSONPARSE_MAX_DEPTH 256

json_t *jsonparse(const char *s, size_t len);

#endif
