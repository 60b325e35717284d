/* jsonparse: a fast JSON parser for the common case, building the tree json_loadb would build. */
#ifndef INGESTD_API_JSONPARSE_H
#define INGESTD_API_JSONPARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Parses s[0..len) as one JSON value followed only by whitespace and returns the same tree
 * json_loadb(r, rlen, JSON_DECODE_ANY | JSON_ALLOW_NUL, ...) returns for the text r[0..rlen)
 * that jsonparse_repair makes of s (same values, same member order, a repeated key keeps its
 * first position and its last value); the caller owns it (json_decref). So a lone surrogate
 * escape reads as U+FFFD, \u0000 in a string value as a NUL byte, and an integer beyond 64
 * bits as a real.
 *
 * It accepts a subset of what that accepts and never anything it rejects. NULL means "not
 * decided here": the text is invalid, or outside the subset (nesting deeper than
 * JSONPARSE_MAX_DEPTH, numbers of more than 63 characters,
 * bytes that are not UTF-8, \u0000 in a key), or memory ran out. The caller then repairs the
 * text and runs json_loadb, which decides and words the error. Thread-safe.
 */
/* The nesting limit of request bodies, on both paths (jsonparse_too_deep guards json_loadb's,
 * which allows 2,048): deep enough for any event, shallow enough that every common consumer of
 * the log parses what it holds (Python's json module stops near 1,000 levels). */
#define JSONPARSE_MAX_DEPTH 256

json_t *jsonparse(const char *s, size_t len);

/*
 * Where the parsed tree's arrays and objects lie in the text, for those whose text is exactly
 * what api/batch.c's serialiser writes for them (compact, no escapes in any string, no raw C1
 * control or U+2028/U+2029, integers of up to 18 digits other than -0, no reals, no repeated
 * key), so it can copy their bytes instead of writing them again member by member.
 */
typedef struct jsonparse_spans jsonparse_spans_t;

/*
 * jsonparse, and when spans is not NULL, *spans: the verbatim arrays and objects of the tree
 * (caller frees with jsonparse_spans_free), or NULL when there are none to give (a repeated key
 * anywhere in the text, or memory ran out for the table: the tree is still returned). The
 * spans point into s: valid while s and the tree live, and only while the tree is not changed.
 */
json_t *jsonparse_spans(const char *s, size_t len, jsonparse_spans_t **spans);

/*
 * The memory of one parsed tree, taken in a few blocks instead of two allocations per node:
 * the tree is released whole with the arena, without a walk or a free per node.
 */
typedef struct jsonparse_arena jsonparse_arena_t;

/*
 * Lets jsonparse_tree build trees in arenas: installs jansson allocation functions
 * (json_set_alloc_funcs) that take from the calling thread's arena while jsonparse_tree fills
 * one, and are plain malloc/free otherwise, so every other jansson use is unchanged (nothing
 * else in the process sets jansson's allocator). Call before threads that use jansson start;
 * later calls do nothing.
 */
void jsonparse_use_arenas(void);

/*
 * jsonparse_spans, with the tree in a new arena when jsonparse_use_arenas ran: then *arena is
 * set (free with jsonparse_arena_free, which frees the tree: never json_decref it nor any of its
 * nodes, and take no reference that outlives the arena). Otherwise, and when the text is not
 * taken (NULL returned), *arena is NULL and the tree, if any, is an ordinary one. The tree may
 * be read from any thread; it must not be changed.
 */
json_t *jsonparse_tree(const char *s, size_t len, jsonparse_spans_t **spans,
                       jsonparse_arena_t **arena);

/* Frees the arena and the tree in it. NULL is a no-op. */
void jsonparse_arena_free(jsonparse_arena_t *a);

/* Whether v (a node of the tree the spans came from) is verbatim: then *text and *len are its
 * bytes in the parsed text. sp NULL: false. Thread-safe (read only). */
bool jsonparse_span(const jsonparse_spans_t *sp, const json_t *v, const char **text, size_t *len);

/* NULL is a no-op. */
void jsonparse_spans_free(jsonparse_spans_t *sp);

/*
 * What Go's encoding/json (and so Segment's API) reads as U+FFFD where jansson refuses the
 * whole text, rewritten so json_loadb reads it the same way: a lone surrogate escape
 * (\ud800..\udfff not in a high-low pair, as JSON.stringify writes for a string cut inside an
 * emoji) becomes \ufffd; each byte that does not start a valid UTF-8 sequence (overlong,
 * encoded surrogate, truncated, above U+10FFFF) becomes U+FFFD's three bytes; \u0000 in an
 * object key (jansson has no NUL keys) becomes \ufffd; an integer beyond 64 bits gets ".0",
 * so it reads as the nearest double (JSON.stringify(1e20) writes 100000000000000000000; Go and
 * JavaScript read every number as a double). Nothing else changes, so a text that
 * was invalid JSON stays invalid. Returns 0 with *out NULL and *out_len = len when nothing
 * needed changing, 0 with *out a malloc'd copy (NUL-terminated; the caller frees) of
 * *out_len bytes, or -1 when out of memory. Thread-safe.
 */
int jsonparse_repair(const char *s, size_t len, char **out, size_t *out_len);

/*
 * Whether s[0..len) opens more than JSONPARSE_MAX_DEPTH arrays and objects inside each other,
 * counting brackets outside strings (a '\\' escapes the next byte in one), valid JSON or not:
 * the check json_loadb needs before it runs, so both parsers share one limit. Thread-safe.
 */
bool jsonparse_too_deep(const char *s, size_t len);

#endif
