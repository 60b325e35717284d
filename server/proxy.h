/* proxy: --trusted-proxies, and the client address behind them (X-Forwarded-For, Forwarded). */
#ifndef INGESTD_PROXY_H
#define INGESTD_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROXY_MAX_NETS 32
#define PROXY_ADDR_LEN 46 /* INET6_ADDRSTRLEN: an address as text, with its NUL */

/* One CIDR; IPv4 ones are kept as IPv4-mapped IPv6 (::ffff:a.b.c.d/96+n). */
typedef struct proxy_net {
    uint8_t addr[16];
    unsigned prefix; /* 0..128 */
} proxy_net_t;

/* A parsed --trusted-proxies list; zero-initialised it is empty (nobody is trusted). */
typedef struct proxy_list {
    proxy_net_t nets[PROXY_MAX_NETS];
    size_t n;
} proxy_list_t;

/*
 * Parses "CIDR[,CIDR...]" ("10.0.0.0/8, 192.168.1.7, ::1/128"; a bare address is a /32 or
 * /128; blanks around entries are ignored; "" is the empty list). Returns 0, or -1 with a
 * one-line reason in errbuf. Pure.
 */
int proxy_parse(const char *spec, proxy_list_t *out, char *errbuf, size_t errlen);

/* An address as 16 bytes, IPv4 as IPv4-mapped IPv6: from a socket address, or from text such as
 * "192.0.2.7" or "2001:db8::1". Return 0, or -1 for another family or unparsable text. Pure. */
int proxy_key_sa(const struct sockaddr *sa, uint8_t out[16]);
int proxy_key_text(const char *text, uint8_t out[16]);

/* Whether `sa` (AF_INET or AF_INET6) lies in one of the list's networks. Pure. */
bool proxy_trusted_sa(const proxy_list_t *l, const struct sockaddr *sa);

/*
 * The client address of a request that came from a trusted proxy: the hops of `forwarded`
 * (RFC 7239 `for=`, preferred when present) or else `xff` (X-Forwarded-For) are read from the
 * right, skipping trusted proxies; the first other one is the client, since only the hops our
 * own proxies added can be believed. When every hop is trusted, the leftmost is the client.
 * Writes the address in canonical text into out (PROXY_ADDR_LEN bytes) and returns 0; returns
 * -1 when neither header holds a usable address (an unparsable hop ends the walk there: the
 * hops left of it were written by someone we cannot vouch for). Pure.
 */
int proxy_client(const proxy_list_t *l, const char *forwarded, const char *xff,
                 char out[PROXY_ADDR_LEN]);

#endif
