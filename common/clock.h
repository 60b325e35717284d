/* clock: the one millisecond clock of every folder (wall time, monotonic time, durations). */
#ifndef INGESTD_COMMON_CLOCK_H
#define INGESTD_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/*
 * The prefix is clk_, not clock_: POSIX reserves clock_ for <time.h>.
 * All are thread-safe and cannot fail on Linux (the clocks always exist).
 */

/* CLOCK_REALTIME in ms since the epoch: timestamps (receivedAt, retention, ages of keys). */
int64_t clk_wall_ms(void);

/* CLOCK_MONOTONIC in ms: deadlines and intervals, which a step of the wall clock must not move. */
int64_t clk_mono_ms(void);

/* CLOCK_MONOTONIC in fractional ms: to measure a duration shorter than a millisecond. */
double clk_mono_msf(void);

/* CLOCK_MONOTONIC in ns: request durations for the histograms. */
int64_t clk_mono_ns(void);

/*
 * The CLOCK_MONOTONIC instant `ms` (>= 0) from now, as pthread_cond_timedwait wants it for a
 * condition variable whose clock is CLOCK_MONOTONIC (pthread_condattr_setclock).
 */
struct timespec clk_mono_after(int64_t ms);

#endif
