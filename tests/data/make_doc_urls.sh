#!/bin/sh
# make_doc_urls.sh: writes a real-data stream for `ingestd filter-bench --stream file:PATH`:
# every http(s)/ftp URL found in /usr/share/doc of this Debian machine (plain and .gz files,
# visited in byte-wise sorted path order), one per line, in the order they appear, trailing
# punctuation stripped. Duplicates are URLs repeated across and within packages' copyright
# files, changelogs and manuals. The stream depends on the installed packages; the output's
# line count, distinct count and sha256 are printed to stderr so a run can be compared.
# Usage: tests/data/make_doc_urls.sh [DOCDIR] > doc-urls.txt
set -eu
dir=${1:-/usr/share/doc}
export LC_ALL=C
find "$dir" -type f | sort | while IFS= read -r f; do
    case "$f" in
    *.gz) gzip -dc -- "$f" 2>/dev/null || true ;;
    *) cat -- "$f" 2>/dev/null || true ;;
    esac
done | grep -aoE '(https?|ftp)://[][A-Za-z0-9._~:/?#@!$&*+;=%-]+' |
    sed -e 's/[].,;:!?*]*$//' >"${TMPDIR:-/tmp}/doc-urls.$$"
{
    printf 'elements %s, distinct %s, sha256 %s\n' \
        "$(wc -l <"${TMPDIR:-/tmp}/doc-urls.$$")" \
        "$(sort -u "${TMPDIR:-/tmp}/doc-urls.$$" | wc -l)" \
        "$(sha256sum <"${TMPDIR:-/tmp}/doc-urls.$$" | cut -d' ' -f1)"
} >&2
cat "${TMPDIR:-/tmp}/doc-urls.$$"
rm -f "${TMPDIR:-/tmp}/doc-urls.$$"
