/* Seedable pseudo-random numbers for the runtime (data-loader offsets, later dropout masks).
 *
 * Generator: xoshiro256** (Blackman & Vigna, 2018): 256 bits of state, period 2^256 - 1,
 * output  rotl(s1 * 5, 7) * 9,  then the state advances with the xor/shift/rotate step.
 * Seeding: the four state words are four successive outputs of splitmix64 started at the
 * seed, so every 64-bit seed (0 included) gives a valid, non-zero state.
 *
 * The state is plain data: copy the struct, or save/restore it as 32 bytes (the four words,
 * each little-endian) for checkpoints; a restored generator continues the exact sequence.
 * (Named fr_prng, not fr_rng: tests/harness.h owns fr_rng for test inputs.) */
#ifndef FR_RNG_H
#define FR_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#define FR_PRNG_STATE_BYTES 32

typedef struct fr_prng {
    uint64_t s[4];
} fr_prng;

void fr_prng_seed(fr_prng *r, uint64_t seed);
/* Next 64 uniformly distributed bits. */
uint64_t fr_prng_next(fr_prng *r);
/* Uniform integer in [0, n) without modulo bias: draws below the largest multiple of n that
 * fits in 2^64 are reduced with %, others are rejected and redrawn (fewer than one redraw in
 * 2^32 for n < 2^32). n == 0 returns 0 without drawing. */
uint64_t fr_prng_below(fr_prng *r, uint64_t n);
/* Uniform double in [0, 1): the top 53 bits of one draw times 2^-53. */
double fr_prng_double(fr_prng *r);
/* Uniform float in [0, 1): the top 24 bits of one draw times 2^-24. */
float fr_prng_float(fr_prng *r);
/* Advance the state by 2^128 draws: gives up to 2^128 non-overlapping streams from one seed
 * (one per data-parallel rank: seed, then jump `rank` times). */
void fr_prng_jump(fr_prng *r);

/* State as FR_PRNG_STATE_BYTES bytes (s[0..3], each little-endian). */
void fr_prng_get_state(const fr_prng *r, uint8_t out[FR_PRNG_STATE_BYTES]);
/* Restore a state saved by fr_prng_get_state. A length other than FR_PRNG_STATE_BYTES or the
 * all-zero state (which xoshiro never leaves) is FR_ERR_PARSE and leaves *r untouched. */
FR_NODISCARD fr_status fr_prng_set_state(fr_prng *r, const void *bytes, size_t len);

#endif
