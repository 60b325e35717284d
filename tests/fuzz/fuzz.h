/* fuzz: what the libFuzzer harnesses under tests/fuzz/ share with their replay driver. */
#ifndef INGESTD_TESTS_FUZZ_H
#define INGESTD_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * The libFuzzer entry point, one per harness: takes one input, returns 0. Built two ways:
 * by tests/fuzz/run with clang -fsanitize=fuzzer (libFuzzer's main drives it), and by CMake
 * with the normal compiler against replay.c, whose main() feeds it every file of the seed
 * corpus and of the regression inputs (ctest fuzz/NAME).
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken property of the code under test: abort, so libFuzzer saves the input as a crash
 * and the replay driver fails. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
