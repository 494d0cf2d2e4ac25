/*
 * arbibench's deployed binary convolution: bit-packed XNOR / AND popcount, the epilogue of arbibench.deploy.
 *
 * C99 with a C ABI and no torch headers: Python calls it through ctypes on tensor memory (arbibench/deploy/kernel.py)
 * after arbibench/deploy/build.py compiled it with the system C compiler. Semantics (arbibench/deploy/semantics.py):
 *
 *   1. pack:   each input pixel's C channels become bits, bit c of word c/64; value bit = (x >= 0).
 *              alphabet 0 ({-1,+1}):       value only.
 *              alphabet 1 ({-1,0,+1}):     value, and a mask bit (x != 0): torch.sign's 0 contributes nothing.
 *              alphabet 2 ({0,1}):         mask bit = value bit = (x >= 0): a 0 contributes nothing.
 *   2. patch:  the KH*KW taps of one output pixel are laid end to end, C bits each, in L = ceil(KH*KW*C/64) words
 *              (the weights of each output channel are packed the same way by Python).
 *   3. accumulate, an exact integer:
 *              dense   acc = K - 2 * popcount(patch XOR w),  K = C * (taps inside the image)
 *              masked  acc = popcount(m) - 2 * popcount(m AND (patch XOR w)),  m = patch mask AND weight mask
 *              Zero padding is exact: a border tap contributes nothing (dense: its weight bits' popcount, precomputed
 *              per tap, is taken back out). pad_value +1 / -1 instead fills border taps with that value, as
 *              hardware without zero padding does.
 *   4. epilogue: out = (float)acc * mul[o], rounded to float32, then + add[o], rounded to float32. Never an FMA:
 *              this file must be compiled with -ffp-contract=off (build.py does).
 *
 * Threads: pthreads over (image, output row) pairs. Popcount: AVX2 (nibble lookup, 4 output channels per vector)
 * chosen at run time where the CPU has it, else scalar (the popcnt instruction where the CPU has it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ABK_X86 1
#else
#define ABK_X86 0
#endif

#define ABK_VERSION 1
#define ABK_MAX_THREADS 256

enum { ISA_AUTO = 0, ISA_SCALAR = 1, ISA_AVX2 = 2 };

typedef struct {
    const float *x;
    int64_t N, C, H, W, nw; /* nw: words per packed pixel */
    int alphabet;
    uint64_t *val, *mask;   /* packed input, [N][H][W][nw]; mask NULL when dense */
    const uint64_t *wval, *wmask; /* packed weights, [O/4][L][4] (4 output channels interleaved) */
    const int32_t *wpop;    /* [O][KH*KW]: popcount of each tap's weight bits (dense zero padding) */
    int64_t O, KH, KW, sh, sw, ph, pw, OH, OW, L;
    int pad_value, masked, isa;
    const float *mul, *add;
    float *out;
} job_t;

int abk_version(void) { return ABK_VERSION; }

static int cpu_has(int which) {
#if ABK_X86 && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (which == ISA_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    return __builtin_cpu_supports("popcnt");
#else
    (void)which;
    return 0;
#endif
}

/* The instruction set the convolution uses for a request (0 auto, 1 scalar, 2 avx2): 1 or 2, or -1 if refused. */
int abk_resolve_isa(int request) {
    if (request == ISA_SCALAR) return ISA_SCALAR;
    if (request == ISA_AVX2) return cpu_has(ISA_AVX2) ? ISA_AVX2 : -1;
    return cpu_has(ISA_AVX2) ? ISA_AVX2 : ISA_SCALAR;
}

/* ---- 1. packing ------------------------------------------------------------------------------------------- */

static void pack_image(const job_t *j, int64_t n) {
    const int64_t hw = j->H * j->W, nw = j->nw;
    uint64_t *v = j->val + n * hw * nw;
    uint64_t *m = j->mask ? j->mask + n * hw * nw : NULL;
    const float *xn = j->x + n * j->C * hw;
    memset(v, 0, (size_t)(hw * nw) * sizeof(uint64_t));
    if (m) memset(m, 0, (size_t)(hw * nw) * sizeof(uint64_t));
    for (int64_t c = 0; c < j->C; c++) {
        const float *xc = xn + c * hw;
        const int s = (int)(c & 63);
        uint64_t *vw = v + (c >> 6), *mw = m ? m + (c >> 6) : NULL;
        if (j->alphabet == 0) {
            for (int64_t p = 0; p < hw; p++) vw[p * nw] |= (uint64_t)(xc[p] >= 0.0f) << s;
            if (mw) /* {-1,+1} through the masked kernel (the weights have zeros): every channel counts */
                for (int64_t p = 0; p < hw; p++) mw[p * nw] |= (uint64_t)1 << s;
        } else if (j->alphabet == 1) {
            for (int64_t p = 0; p < hw; p++) {
                vw[p * nw] |= (uint64_t)(xc[p] >= 0.0f) << s;
                mw[p * nw] |= (uint64_t)(xc[p] != 0.0f) << s;
            }
        } else {
            for (int64_t p = 0; p < hw; p++) {
                const uint64_t b = (uint64_t)(xc[p] >= 0.0f) << s;
                vw[p * nw] |= b;
                mw[p * nw] |= b;
            }
        }
    }
}

/* ---- 2. patches ------------------------------------------------------------------------------------------- */

/* OR nbits bits of src (bits beyond nbits are zero) into dst at bit offset off; dst has one spare word. */
static void put_bits(uint64_t *dst, int64_t off, const uint64_t *src, int64_t nbits) {
    const int64_t words = (nbits + 63) >> 6;
    const int sh = (int)(off & 63);
    uint64_t *d = dst + (off >> 6);
    for (int64_t i = 0; i < words; i++) {
        d[i] |= src[i] << sh;
        if (sh) d[i + 1] |= src[i] >> (64 - sh);
    }
}

/* ---- 3. popcount dot products, 4 output channels at a time ------------------------------------------------- */

/* Scalar bodies, inlined into a portable and a popcnt-instruction copy. */
static inline __attribute__((always_inline)) void dense_body(const job_t *j, const uint64_t *patch, int32_t *pop) {
    const int64_t L = j->L, blocks = (j->O + 3) / 4;
    for (int64_t b = 0; b < blocks; b++) {
        const uint64_t *w = j->wval + b * L * 4;
        int32_t p0 = 0, p1 = 0, p2 = 0, p3 = 0;
        for (int64_t l = 0; l < L; l++) {
            const uint64_t a = patch[l];
            p0 += __builtin_popcountll(a ^ w[4 * l + 0]);
            p1 += __builtin_popcountll(a ^ w[4 * l + 1]);
            p2 += __builtin_popcountll(a ^ w[4 * l + 2]);
            p3 += __builtin_popcountll(a ^ w[4 * l + 3]);
        }
        pop[4 * b + 0] = p0; pop[4 * b + 1] = p1; pop[4 * b + 2] = p2; pop[4 * b + 3] = p3;
    }
}

static inline __attribute__((always_inline)) void masked_body(const job_t *j, const uint64_t *patch,
                                                             const uint64_t *pmask, int32_t *acc) {
    const int64_t L = j->L, blocks = (j->O + 3) / 4;
    for (int64_t b = 0; b < blocks; b++) {
        const uint64_t *w = j->wval + b * L * 4, *wm = j->wmask + b * L * 4;
        for (int k = 0; k < 4; k++) {
            int32_t cnt = 0, pop = 0;
            for (int64_t l = 0; l < L; l++) {
                const uint64_t m = pmask[l] & wm[4 * l + k];
                cnt += __builtin_popcountll(m);
                pop += __builtin_popcountll(m & (patch[l] ^ w[4 * l + k]));
            }
            acc[4 * b + k] = cnt - 2 * pop;
        }
    }
}

static void dense_generic(const job_t *j, const uint64_t *p, int32_t *pop) { dense_body(j, p, pop); }
static void masked_generic(const job_t *j, const uint64_t *p, const uint64_t *m, int32_t *a) {
    masked_body(j, p, m, a);
}

#if ABK_X86
__attribute__((target("popcnt"))) static void dense_popcnt(const job_t *j, const uint64_t *p, int32_t *pop) {
    dense_body(j, p, pop);
}
__attribute__((target("popcnt"))) static void masked_popcnt(const job_t *j, const uint64_t *p, const uint64_t *m,
                                                             int32_t *a) {
    masked_body(j, p, m, a);
}

/* Per-byte popcount of a 256-bit vector: two nibble lookups (Mula's method). */
__attribute__((target("avx2"))) static inline __m256i popcnt8(__m256i v) {
    const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                         0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(v, low);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    return _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
}

/* Byte counters hold at most 255: 31 words of 8 bits per byte, then they are summed into 64-bit lanes. */
#define ABK_CHUNK 31

__attribute__((target("avx2"))) static void dense_avx2(const job_t *j, const uint64_t *patch, int32_t *pop) {
    const int64_t L = j->L, blocks = (j->O + 3) / 4;
    const __m256i zero = _mm256_setzero_si256();
    int64_t b = 0;
    for (; b + 1 < blocks; b += 2) { /* two blocks (8 output channels) per pass for instruction-level parallelism */
        const uint64_t *w0 = j->wval + b * L * 4, *w1 = w0 + L * 4;
        __m256i t0 = zero, t1 = zero;
        for (int64_t l0 = 0; l0 < L; l0 += ABK_CHUNK) {
            const int64_t l1 = l0 + ABK_CHUNK < L ? l0 + ABK_CHUNK : L;
            __m256i c0 = zero, c1 = zero;
            for (int64_t l = l0; l < l1; l++) {
                const __m256i a = _mm256_set1_epi64x((long long)patch[l]);
                c0 = _mm256_add_epi8(c0, popcnt8(_mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(w0 + 4 * l)))));
                c1 = _mm256_add_epi8(c1, popcnt8(_mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(w1 + 4 * l)))));
            }
            t0 = _mm256_add_epi64(t0, _mm256_sad_epu8(c0, zero));
            t1 = _mm256_add_epi64(t1, _mm256_sad_epu8(c1, zero));
        }
        int64_t o0[4], o1[4];
        _mm256_storeu_si256((__m256i *)o0, t0);
        _mm256_storeu_si256((__m256i *)o1, t1);
        for (int k = 0; k < 4; k++) { pop[4 * b + k] = (int32_t)o0[k]; pop[4 * b + 4 + k] = (int32_t)o1[k]; }
    }
    for (; b < blocks; b++) {
        const uint64_t *w0 = j->wval + b * L * 4;
        __m256i t0 = zero;
        for (int64_t l0 = 0; l0 < L; l0 += ABK_CHUNK) {
            const int64_t l1 = l0 + ABK_CHUNK < L ? l0 + ABK_CHUNK : L;
            __m256i c0 = zero;
            for (int64_t l = l0; l < l1; l++) {
                const __m256i a = _mm256_set1_epi64x((long long)patch[l]);
                c0 = _mm256_add_epi8(c0, popcnt8(_mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(w0 + 4 * l)))));
            }
            t0 = _mm256_add_epi64(t0, _mm256_sad_epu8(c0, zero));
        }
        int64_t o0[4];
        _mm256_storeu_si256((__m256i *)o0, t0);
        for (int k = 0; k < 4; k++) pop[4 * b + k] = (int32_t)o0[k];
    }
}

__attribute__((target("avx2"))) static void masked_avx2(const job_t *j, const uint64_t *patch, const uint64_t *pmask,
                                                        int32_t *acc) {
    const int64_t L = j->L, blocks = (j->O + 3) / 4;
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t b = 0; b < blocks; b++) {
        const uint64_t *w = j->wval + b * L * 4, *wm = j->wmask + b * L * 4;
        __m256i tc = zero, tp = zero;
        for (int64_t l0 = 0; l0 < L; l0 += ABK_CHUNK) {
            const int64_t l1 = l0 + ABK_CHUNK < L ? l0 + ABK_CHUNK : L;
            __m256i cc = zero, cp = zero;
            for (int64_t l = l0; l < l1; l++) {
                const __m256i a = _mm256_set1_epi64x((long long)patch[l]);
                const __m256i pm = _mm256_set1_epi64x((long long)pmask[l]);
                const __m256i m = _mm256_and_si256(pm, _mm256_loadu_si256((const __m256i *)(wm + 4 * l)));
                const __m256i x = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(w + 4 * l)));
                cc = _mm256_add_epi8(cc, popcnt8(m));
                cp = _mm256_add_epi8(cp, popcnt8(_mm256_and_si256(m, x)));
            }
            tc = _mm256_add_epi64(tc, _mm256_sad_epu8(cc, zero));
            tp = _mm256_add_epi64(tp, _mm256_sad_epu8(cp, zero));
        }
        int64_t c4[4], p4[4];
        _mm256_storeu_si256((__m256i *)c4, tc);
        _mm256_storeu_si256((__m256i *)p4, tp);
        for (int k = 0; k < 4; k++) acc[4 * b + k] = (int32_t)(c4[k] - 2 * p4[k]);
    }
}
#endif

typedef void (*dense_fn)(const job_t *, const uint64_t *, int32_t *);
typedef void (*masked_fn)(const job_t *, const uint64_t *, const uint64_t *, int32_t *);

/* ---- one output row of one image: patches, dot products, epilogue -------------------------------------------- */

typedef struct {
    uint64_t *patch, *pmask, *ones; /* L + 1 words each; ones: the C channel bits of one pixel, set */
    int32_t *pop, *acc;             /* O rounded up to 4; O * OW */
} scratch_t;

static void conv_row(const job_t *j, scratch_t *s, int64_t n, int64_t oy, dense_fn dense, masked_fn masked) {
    const int64_t T = j->KH * j->KW, C = j->C, nw = j->nw, L = j->L, O = j->O, OW = j->OW;
    for (int64_t ox = 0; ox < OW; ox++) {
        int64_t valid = 0;
        int32_t invalid[64 * 64];
        int64_t ninvalid = 0;
        memset(s->patch, 0, (size_t)(L + 1) * sizeof(uint64_t));
        if (j->masked) memset(s->pmask, 0, (size_t)(L + 1) * sizeof(uint64_t));
        for (int64_t ky = 0; ky < j->KH; ky++) {
            const int64_t iy = oy * j->sh - j->ph + ky;
            for (int64_t kx = 0; kx < j->KW; kx++) {
                const int64_t ix = ox * j->sw - j->pw + kx, t = ky * j->KW + kx;
                if (iy >= 0 && iy < j->H && ix >= 0 && ix < j->W) {
                    const int64_t at = ((n * j->H + iy) * j->W + ix) * nw;
                    put_bits(s->patch, t * C, j->val + at, C);
                    if (j->masked) put_bits(s->pmask, t * C, j->mask + at, C);
                    valid++;
                } else if (j->pad_value == 0) {
                    invalid[ninvalid++] = (int32_t)t; /* patch and mask bits stay 0 */
                } else {
                    if (j->pad_value > 0) put_bits(s->patch, t * C, s->ones, C);
                    if (j->masked) put_bits(s->pmask, t * C, s->ones, C);
                }
            }
        }
        if (j->masked) {
            masked(j, s->patch, s->pmask, s->pop);
            for (int64_t o = 0; o < O; o++) s->acc[o * OW + ox] = s->pop[o];
        } else {
            dense(j, s->patch, s->pop);
            const int32_t k = (int32_t)(C * (j->pad_value == 0 ? valid : T));
            for (int64_t o = 0; o < O; o++) {
                int32_t p = s->pop[o];
                for (int64_t i = 0; i < ninvalid; i++) p -= j->wpop[o * T + invalid[i]];
                s->acc[o * OW + ox] = k - 2 * p;
            }
        }
    }
    for (int64_t o = 0; o < O; o++) {
        float *dst = j->out + ((n * O + o) * j->OH + oy) * OW;
        const int32_t *a = s->acc + o * OW;
        const float mu = j->mul[o], ad = j->add[o];
        for (int64_t ox = 0; ox < OW; ox++) {
            const float scaled = (float)a[ox] * mu; /* rounded to float32 here ... */
            dst[ox] = scaled + ad;                  /* ... and again here: two roundings, never one FMA */
        }
    }
}

/* ---- threads ------------------------------------------------------------------------------------------------ */

typedef struct {
    const job_t *job;
    int64_t begin, end;
    int phase; /* 0: pack images [begin, end); 1: convolve (image, row) units [begin, end) */
    int rc;
} slice_t;

static void *run_slice(void *arg) {
    slice_t *sl = (slice_t *)arg;
    const job_t *j = sl->job;
    sl->rc = 0;
    if (sl->phase == 0) {
        for (int64_t n = sl->begin; n < sl->end; n++) pack_image(j, n);
        return NULL;
    }
    dense_fn dense = dense_generic;
    masked_fn masked = masked_generic;
#if ABK_X86
    if (j->isa == ISA_AVX2) {
        dense = dense_avx2;
        masked = masked_avx2;
    } else if (cpu_has(ISA_SCALAR)) {
        dense = dense_popcnt;
        masked = masked_popcnt;
    }
#endif
    const int64_t O4 = (j->O + 3) / 4 * 4;
    scratch_t s;
    s.patch = calloc((size_t)(j->L + 1), sizeof(uint64_t));
    s.pmask = calloc((size_t)(j->L + 1), sizeof(uint64_t));
    s.ones = calloc((size_t)(j->nw + 1), sizeof(uint64_t));
    s.pop = calloc((size_t)O4, sizeof(int32_t));
    s.acc = calloc((size_t)(j->O * j->OW), sizeof(int32_t));
    if (!s.patch || !s.pmask || !s.ones || !s.pop || !s.acc) {
        sl->rc = -2;
    } else {
        for (int64_t c = 0; c < j->C; c++) s.ones[c >> 6] |= (uint64_t)1 << (c & 63);
        for (int64_t u = sl->begin; u < sl->end; u++) conv_row(j, &s, u / j->OH, u % j->OH, dense, masked);
    }
    free(s.patch); free(s.pmask); free(s.ones); free(s.pop); free(s.acc);
    return NULL;
}

static int run_phase(const job_t *j, int phase, int64_t units, int threads) {
    slice_t sl[ABK_MAX_THREADS];
    pthread_t tid[ABK_MAX_THREADS];
    int started[ABK_MAX_THREADS];
    if (threads < 1) threads = 1;
    if (threads > ABK_MAX_THREADS) threads = ABK_MAX_THREADS;
    if (threads > units) threads = (int)(units > 0 ? units : 1);
    for (int t = 0; t < threads; t++) {
        sl[t].job = j;
        sl[t].phase = phase;
        sl[t].begin = units * t / threads;
        sl[t].end = units * (t + 1) / threads;
        sl[t].rc = 0;
        started[t] = 0;
    }
    for (int t = 1; t < threads; t++) started[t] = pthread_create(&tid[t], NULL, run_slice, &sl[t]) == 0;
    run_slice(&sl[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else run_slice(&sl[t]); /* no thread to spare: this one does the slice */
    }
    for (int t = 0; t < threads; t++)
        if (sl[t].rc) return sl[t].rc;
    return 0;
}

/*
 * The whole binary convolution: x float32 [N][C][H][W] (the sign's argument) -> out float32 [N][O][OH][OW].
 * Weights as arbibench/deploy/kernel.py packs them. Returns the instruction set used (1 scalar, 2 avx2), or < 0:
 * -1 the requested instruction set is missing, -2 out of memory, -3 bad arguments.
 */
int abk_binary_conv2d(const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int alphabet,
                      const uint64_t *wval, const uint64_t *wmask, const int32_t *wpop, int64_t O, int64_t KH,
                      int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int pad_value, const float *mul,
                      const float *add, float *out, int64_t OH, int64_t OW, int threads, int isa_request) {
    job_t j;
    if (N < 0 || C < 1 || H < 1 || W < 1 || O < 1 || KH < 1 || KW < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 ||
        alphabet < 0 || alphabet > 2 || pad_value < -1 || pad_value > 1 || KH * KW > 64 * 64)
        return -3;
    if (OH != (H + 2 * ph - KH) / sh + 1 || OW != (W + 2 * pw - KW) / sw + 1 || OH < 1 || OW < 1) return -3;
    const int isa = abk_resolve_isa(isa_request);
    if (isa < 0) return -1;
    if (N == 0) return isa;
    memset(&j, 0, sizeof j);
    j.x = x; j.N = N; j.C = C; j.H = H; j.W = W; j.nw = (C + 63) / 64; j.alphabet = alphabet;
    j.wval = wval; j.wmask = wmask; j.wpop = wpop;
    j.O = O; j.KH = KH; j.KW = KW; j.sh = sh; j.sw = sw; j.ph = ph; j.pw = pw; j.OH = OH; j.OW = OW;
    j.L = (KH * KW * C + 63) / 64;
    j.pad_value = pad_value; j.masked = wmask != NULL; j.isa = isa;
    j.mul = mul; j.add = add; j.out = out;
    if (alphabet != 0 && !j.masked) return -3; /* a mask on the input needs the masked kernel (and a weight mask) */
    j.val = malloc((size_t)(N * H * W * j.nw) * sizeof(uint64_t));
    j.mask = j.masked ? malloc((size_t)(N * H * W * j.nw) * sizeof(uint64_t)) : NULL;
    if (!j.val || (j.masked && !j.mask)) {
        free(j.val); free(j.mask);
        return -2;
    }
    int rc = run_phase(&j, 0, N, threads);
    if (rc == 0) rc = run_phase(&j, 1, N * OH, threads);
    free(j.val); free(j.mask);
    return rc ? rc : isa;
}
