/* xoshiro256** with splitmix64 seeding (see rng.h). */
#include "graph/rng.h"

#include <string.h>

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fr_prng_seed(fr_prng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    /* splitmix64 is a bijection of its counter, so four outputs are never all zero; keep the
     * invariant explicit anyway. */
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint64_t fr_prng_next(fr_prng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t fr_prng_below(fr_prng *r, uint64_t n)
{
    if (n == 0) return 0;
    /* 2^64 mod n, computed without 128-bit arithmetic: (2^64 - n) mod n. Draws below this
     * many values would make the low residues more likely, so they are rejected. */
    uint64_t reject_below = (0 - n) % n;
    for (;;) {
        uint64_t x = fr_prng_next(r);
        if (x >= reject_below) return x % n;
    }
}

double fr_prng_double(fr_prng *r) { return (double)(fr_prng_next(r) >> 11) * 0x1.0p-53; }

float fr_prng_float(fr_prng *r) { return (float)(fr_prng_next(r) >> 40) * 0x1.0p-24f; }

void fr_prng_jump(fr_prng *r)
{
    /* The published jump polynomial of xoshiro256** for 2^128 steps. */
    static const uint64_t jump[4] = {0x180ec6d33cfd0abaull, 0xd5a61266f0c9392cull,
                                     0xa9582618e03fc9aaull, 0x39abdc4529b1661cull};
    uint64_t acc[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        for (int b = 0; b < 64; b++) {
            if (jump[i] & (1ull << b))
                for (int k = 0; k < 4; k++) acc[k] ^= r->s[k];
            fr_prng_next(r);
        }
    }
    memcpy(r->s, acc, sizeof acc);
}

void fr_prng_get_state(const fr_prng *r, uint8_t out[FR_PRNG_STATE_BYTES])
{
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 8; b++) out[i * 8 + b] = (uint8_t)(r->s[i] >> (8 * b));
}

fr_status fr_prng_set_state(fr_prng *r, const void *bytes, size_t len)
{
    if (!r || !bytes) return fr_error(FR_ERR_INVALID_ARG, "fr_prng_set_state: NULL argument");
    if (len != FR_PRNG_STATE_BYTES)
        return fr_error(FR_ERR_PARSE, "random generator state is %zu bytes, expected %d", len,
                        FR_PRNG_STATE_BYTES);
    const uint8_t *p = bytes;
    uint64_t s[4];
    for (int i = 0; i < 4; i++) {
        s[i] = 0;
        for (int b = 0; b < 8; b++) s[i] |= (uint64_t)p[i * 8 + b] << (8 * b);
    }
    if (!(s[0] | s[1] | s[2] | s[3]))
        return fr_error(FR_ERR_PARSE, "random generator state is all zero (not a saved state)");
    memcpy(r->s, s, sizeof s);
    return FR_OK;
}
