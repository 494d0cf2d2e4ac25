/*
 * arbibench's deployed binary convolution: bit-packed XNOR / AND popcount, the epilogue of arbibench.deploy.
 *
 * C99 with a C ABI and no torch headers: Python calls it through ctypes on tensor memory (arbibench/deploy/kernel.py)
 * after arbibench/deploy/build.py compiled it with the system C compiler. Semantics (arbibench/deploy/semantics.py):
 *
 *   1. pack:   each input pixel's C channels become bits, bit c of word c/64; value bit = (x >= 0).
 *              alphabet 0 ({-1,+1}):       value only (the masked kernel, used for weights with zeros, sets every
 *                                          mask bit).
 *              alphabet 1 ({-1,0,+1}):     value, and a mask bit (x != 0): torch.sign's 0 contributes nothing.
 *              alphabet 2 ({0,1}):         mask bit = value bit = (x >= 0): a 0 contributes nothing.
 *   2. segments: for each input row and output column, the KW taps of that column laid end to end, C bits each
 *              (bit kx*C + c), in SW = ceil(KW*C/64) words; a patch is the KH segments of its rows, L = KH*SW words
 *              (the weights of each output channel are packed the same way by Python).
 *   3. accumulate, an exact integer, 8 (AVX-512) / 4 (AVX2) / 1 (scalar) output pixels per vector:
 *              dense   acc = K - 2 * popcount((patch XOR w) AND valid),  K = C * (taps inside the image)
 *              masked  acc = popcount(m) - 2 * popcount(m AND (patch XOR w)),  m = patch mask AND weight mask
 *              Zero padding is exact: a border tap contributes nothing (a row above or below the image is skipped,
 *              a column beside it is masked out by `valid`). pad_value +1 / -1 instead fills border taps with that
 *              value, as hardware without zero padding does.
 *   4. epilogue: out = (float)acc * mul[o], rounded to float32, then + add[o], rounded to float32. Never an FMA:
 *              this file must be compiled with -ffp-contract=off (build.py does). Then, where the network has them
 *              right after the convolution's BatchNorm, the float32 glue torch would compute next, one IEEE
 *              operation at a time in torch's order: + residual; then hardtanh (clamp), PReLU (x > 0 ? x : a x) or
 *              RPReLU ((x - g) > 0 ? (x - g) : a (x - g), then + z). The sign's threshold t (RSign's per channel,
 *              a centred sample's mean) is compared directly: x >= t is the same test as x - t >= 0, and x != t as
 *              x - t != 0, in IEEE arithmetic with subnormals (no flush-to-zero), for finite x and t.
 *
 * Threads: as many as the work pays for (ABK_WORK_PER_THREAD), the host's OpenMP workers (torch's, given by
 * abk_use_openmp), else pthreads started per call. With at least as many images as threads, each thread
 * takes whole images (pack, segments, every row) in a one-image scratch; with fewer, all images are packed first
 * and the (image, output row) pairs are shared out.
 * Popcount, chosen at run time: AVX-512 (VPOPCNTQ, 8 output pixels per vector), AVX2 (nibble lookup, 4 per
 * vector), or scalar (the popcnt instruction where the CPU has it).
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

#define ABK_VERSION 5
#define ABK_MAX_THREADS 256
#define ABK_MAX_WORDS 256 /* KH * SW: words of one patch */
#define ABK_WORK_PER_THREAD (1 << 19)

enum { ISA_AUTO = 0, ISA_SCALAR = 1, ISA_AVX2 = 2, ISA_AVX512 = 3 };

typedef struct {
    const float *x;
    int64_t N, C, H, W, nw; /* nw: words per packed pixel */
    int alphabet;
    uint64_t *val, *mask;   /* packed input, [N][H][W][nw]; mask NULL when dense */
    uint64_t *seg, *segm;   /* segments, [N][H + 1][SW][OWp] (value, mask) */
    uint64_t *valid;        /* [SW][OWp]: the segment bits of taps inside the image, per output column */
    int32_t *kcol;          /* [OWp]: C * (taps of a segment inside the image), per output column */
    uint64_t *ones;         /* the C channel bits of one pixel, set */
    const uint64_t *wval, *wmask; /* packed weights, [O][KH * SW]; wmask NULL when dense */
    int64_t O, KH, KW, sh, sw, ph, pw, OH, OW, OWp, SW;
    int pad_value, masked, isa;
    int per_image;          /* 1: val, mask, seg and segm hold one image (the calling thread's), 0: all N */
    const float *mul, *add;
    const float *thresh;    /* [N][C] or NULL: the sign's threshold (RSign's t_c, a sample's mean), else 0 */
    const float *residual;  /* [N][O][OH][OW] or NULL: added after the epilogue */
    int act;                /* after the residual: 0 none, 1 clamp(lo, hi), 2 PReLU, 3 RPReLU */
    const float *act_params; /* clamp: lo, hi; PReLU: slope[O]; RPReLU: shift_in[O], slope[O], shift_out[O] */
    float *out;
} job_t;

int abk_version(void) { return ABK_VERSION; }

static int cpu_has(int which) {
#if ABK_X86 && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (which == ISA_AVX512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq");
    if (which == ISA_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    return __builtin_cpu_supports("popcnt");
#else
    (void)which;
    return 0;
#endif
}

/* The instruction set the convolution uses for a request (0 auto, 1 scalar, 2 avx2, 3 avx512), or -1 if refused. */
int abk_resolve_isa(int request) {
    if (request == ISA_SCALAR) return ISA_SCALAR;
    if (request == ISA_AVX2 || request == ISA_AVX512) return cpu_has(request) ? request : -1;
    if (cpu_has(ISA_AVX512)) return ISA_AVX512;
    return cpu_has(ISA_AVX2) ? ISA_AVX2 : ISA_SCALAR;
}

/* Where image n's packed pixels and segments sit in the scratch: its own place, or the thread's one image. */
static inline int64_t slot(const job_t *j, int64_t n) { return j->per_image ? 0 : n; }

/* ---- 1. packing ------------------------------------------------------------------------------------------- */

static void pack_channels(const job_t *j, const float *xn, const float *tn, uint64_t *v, uint64_t *m, int64_t p0,
                          int64_t p1) {
    const int64_t hw = j->H * j->W, nw = j->nw;
    for (int64_t c = 0; c < j->C; c++) {
        const float *xc = xn + c * hw;
        const float t = tn ? tn[c] : 0.0f;
        const int s = (int)(c & 63);
        uint64_t *vw = v + (c >> 6), *mw = m ? m + (c >> 6) : NULL;
        if (j->alphabet == 0) {
            for (int64_t p = p0; p < p1; p++) vw[p * nw] |= (uint64_t)(xc[p] >= t) << s;
            if (mw) /* {-1,+1} through the masked kernel (the weights have zeros): every channel counts */
                for (int64_t p = p0; p < p1; p++) mw[p * nw] |= (uint64_t)1 << s;
        } else if (j->alphabet == 1) {
            for (int64_t p = p0; p < p1; p++) {
                vw[p * nw] |= (uint64_t)(xc[p] >= t) << s;
                mw[p * nw] |= (uint64_t)(xc[p] != t) << s;
            }
        } else {
            for (int64_t p = p0; p < p1; p++) {
                const uint64_t b = (uint64_t)(xc[p] >= t) << s;
                vw[p * nw] |= b;
                mw[p * nw] |= b;
            }
        }
    }
}

#if ABK_X86
/* 16 pixels at a time: one comparison mask per channel, OR-ed into two vectors of 8 pixel words. nw == 1 only. */
__attribute__((target("avx512f"))) static int64_t pack_avx512(const job_t *j, const float *xn, const float *tn,
                                                              uint64_t *v, uint64_t *m) {
    const int64_t hw = j->H * j->W;
    int64_t p = 0;
    for (; p + 16 <= hw; p += 16) {
        __m512i vlo = _mm512_setzero_si512(), vhi = vlo, mlo = vlo, mhi = vlo;
        for (int64_t c = 0; c < j->C; c++) {
            const __m512 xv = _mm512_loadu_ps(xn + c * hw + p);
            const __m512 zero = _mm512_set1_ps(tn ? tn[c] : 0.0f); /* the threshold */
            const __m512i bit = _mm512_set1_epi64((long long)((uint64_t)1 << c));
            const __mmask16 ge = _mm512_cmp_ps_mask(xv, zero, _CMP_GE_OQ);
            vlo = _mm512_mask_or_epi64(vlo, (__mmask8)ge, vlo, bit);
            vhi = _mm512_mask_or_epi64(vhi, (__mmask8)(ge >> 8), vhi, bit);
            if (j->alphabet == 1) {
                const __mmask16 nz = _mm512_cmp_ps_mask(xv, zero, _CMP_NEQ_UQ);
                mlo = _mm512_mask_or_epi64(mlo, (__mmask8)nz, mlo, bit);
                mhi = _mm512_mask_or_epi64(mhi, (__mmask8)(nz >> 8), mhi, bit);
            }
        }
        _mm512_storeu_si512((void *)(v + p), vlo);
        _mm512_storeu_si512((void *)(v + p + 8), vhi);
        if (m) {
            if (j->alphabet == 2) { mlo = vlo; mhi = vhi; }
            if (j->alphabet == 0) { /* every channel counts */
                const __m512i all = _mm512_set1_epi64((long long)(j->C == 64 ? ~(uint64_t)0 : (((uint64_t)1 << j->C) - 1)));
                mlo = all; mhi = all;
            }
            _mm512_storeu_si512((void *)(m + p), mlo);
            _mm512_storeu_si512((void *)(m + p + 8), mhi);
        }
    }
    return p;
}
#endif

static void pack_image(const job_t *j, int64_t n) {
    const int64_t hw = j->H * j->W, nw = j->nw;
    uint64_t *v = j->val + slot(j, n) * hw * nw;
    uint64_t *m = j->mask ? j->mask + slot(j, n) * hw * nw : NULL;
    const float *xn = j->x + n * j->C * hw;
    const float *tn = j->thresh ? j->thresh + n * j->C : NULL;
    int64_t done = 0;
#if ABK_X86
    if (j->isa == ISA_AVX512 && nw == 1) done = pack_avx512(j, xn, tn, v, m);
#endif
    memset(v + done * nw, 0, (size_t)((hw - done) * nw) * sizeof(uint64_t));
    if (m) memset(m + done * nw, 0, (size_t)((hw - done) * nw) * sizeof(uint64_t));
    if (done < hw) pack_channels(j, xn, tn, v, m, done, hw);
}

/* ---- 2. segments ----------------------------------------------------------------------------------------- */

/* OR nbits bits of src (bits beyond nbits are zero) into dst at bit offset off; dst has one spare word. */
static inline void put_bits(uint64_t *dst, int64_t off, const uint64_t *src, int64_t nbits) {
    const int sh = (int)(off & 63);
    uint64_t *d = dst + (off >> 6);
    const int64_t words = (nbits + 63) >> 6;
    for (int64_t i = 0; i < words; i++) {
        d[i] |= src[i] << sh;
        if (sh) d[i + 1] |= src[i] >> (64 - sh);
    }
}

/* seg[n][iy][w][ox] (iy = H: the row of pad values above and below the image, for pad_value +1 / -1). */
static inline int64_t seg_at(const job_t *j, int64_t n, int64_t iy, int64_t w) {
    return ((slot(j, n) * (j->H + 1) + iy) * j->SW + w) * j->OWp;
}

/* One word per pixel (C <= 64) and a segment of at most 8 words: shifts in registers, no calls. */
static void build_segments_narrow(const job_t *j, int64_t n) {
    const int64_t C = j->C, SW = j->SW;
    const uint64_t ones = j->ones[0], padv = j->pad_value > 0 ? ones : 0;
    for (int64_t iy = 0; iy <= j->H; iy++) {
        if (iy == j->H && j->pad_value == 0) break; /* the pad row is read only for +-1 padding */
        const uint64_t *vrow = j->val + (slot(j, n) * j->H + (iy < j->H ? iy : 0)) * j->W;
        const uint64_t *mrow = j->masked ? j->mask + (slot(j, n) * j->H + (iy < j->H ? iy : 0)) * j->W : NULL;
        uint64_t *dst = j->seg + seg_at(j, n, iy, 0), *dstm = j->masked ? j->segm + seg_at(j, n, iy, 0) : NULL;
        for (int64_t ox = 0; ox < j->OW; ox++) {
            uint64_t t[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, tm[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t kx = 0; kx < j->KW; kx++) {
                const int64_t ix = ox * j->sw - j->pw + kx;
                uint64_t v, m;
                if (iy < j->H && ix >= 0 && ix < j->W) {
                    v = vrow[ix];
                    m = mrow ? mrow[ix] : 0;
                } else if (j->pad_value != 0) {
                    v = padv;
                    m = ones;
                } else {
                    continue;
                }
                const int64_t off = kx * C, q = off >> 6;
                const int sh = (int)(off & 63);
                t[q] |= v << sh;
                tm[q] |= m << sh;
                if (sh && sh + C > 64) {
                    t[q + 1] |= v >> (64 - sh);
                    tm[q + 1] |= m >> (64 - sh);
                }
            }
            for (int64_t q = 0; q < SW; q++) dst[q * j->OWp + ox] = t[q];
            if (dstm)
                for (int64_t q = 0; q < SW; q++) dstm[q * j->OWp + ox] = tm[q];
        }
    }
}

/* The common case of a dense layer with zero padding and KW * C <= 64 (C <= 21 for 3x3): one word per segment. */
static void build_segments_word(const job_t *j, int64_t n) {
    const int64_t C = j->C, KW = j->KW, W = j->W, sw = j->sw, pw = j->pw;
    for (int64_t iy = 0; iy < j->H; iy++) {
        const uint64_t *vrow = j->val + (slot(j, n) * j->H + iy) * W;
        uint64_t *dst = j->seg + seg_at(j, n, iy, 0);
        for (int64_t ox = 0; ox < j->OW; ox++) {
            const int64_t ix0 = ox * sw - pw;
            uint64_t t = 0;
            if (ix0 >= 0 && ix0 + KW <= W) {
                for (int64_t kx = 0; kx < KW; kx++) t |= vrow[ix0 + kx] << (kx * C);
            } else {
                for (int64_t kx = 0; kx < KW; kx++)
                    if (ix0 + kx >= 0 && ix0 + kx < W) t |= vrow[ix0 + kx] << (kx * C);
            }
            dst[ox] = t;
        }
    }
}

/* The lanes past the row's end (OW..OWp) of every segment row: zero, so that the last block reads defined words. */
static void zero_tail_lanes(const job_t *j, int64_t n) {
    if (j->OWp == j->OW) return;
    const size_t tail = (size_t)(j->OWp - j->OW) * sizeof(uint64_t);
    for (int64_t iy = 0; iy <= j->H; iy++)
        for (int64_t q = 0; q < j->SW; q++) {
            memset(j->seg + seg_at(j, n, iy, q) + j->OW, 0, tail);
            if (j->masked) memset(j->segm + seg_at(j, n, iy, q) + j->OW, 0, tail);
        }
}

static void build_segments(const job_t *j, int64_t n, uint64_t *tmp, uint64_t *tmpm) {
    const int64_t C = j->C, nw = j->nw, SW = j->SW;
    zero_tail_lanes(j, n);
    if (nw == 1 && j->KW * C <= 64 && !j->masked && j->pad_value == 0) {
        build_segments_word(j, n);
        return;
    }
    if (nw == 1 && SW <= 8) {
        build_segments_narrow(j, n);
        return;
    }
    for (int64_t iy = 0; iy <= j->H; iy++) {
        if (iy == j->H && j->pad_value == 0) break; /* the pad row is read only for +-1 padding */
        for (int64_t ox = 0; ox < j->OW; ox++) {
            memset(tmp, 0, (size_t)(SW + 1) * sizeof(uint64_t));
            memset(tmpm, 0, (size_t)(SW + 1) * sizeof(uint64_t));
            for (int64_t kx = 0; kx < j->KW; kx++) {
                const int64_t ix = ox * j->sw - j->pw + kx;
                if (iy < j->H && ix >= 0 && ix < j->W) {
                    const int64_t at = ((slot(j, n) * j->H + iy) * j->W + ix) * nw;
                    put_bits(tmp, kx * C, j->val + at, C);
                    if (j->masked) put_bits(tmpm, kx * C, j->mask + at, C);
                } else if (j->pad_value != 0) {
                    if (j->pad_value > 0) put_bits(tmp, kx * C, j->ones, C);
                    put_bits(tmpm, kx * C, j->ones, C);
                }
            }
            for (int64_t w = 0; w < SW; w++) {
                j->seg[seg_at(j, n, iy, w) + ox] = tmp[w];
                if (j->masked) j->segm[seg_at(j, n, iy, w) + ox] = tmpm[w];
            }
        }
    }
}

/* ---- 3 and 4. one block of output pixels of one row: popcounts per output channel, then the epilogue ------- */

/* The rows of a patch that count: their indices into the segment rows (the pad row for +-1 padding). */
typedef struct {
    int64_t rows[64];
    int64_t nrows;
} rows_t;

/* The glue after the epilogue, one IEEE operation at a time: + residual, then the activation. */
static inline float glue(const job_t *j, int64_t o, float y, int64_t at) {
    if (j->residual) y = y + j->residual[at];
    const float *p = j->act_params;
    if (j->act == 1) {
        y = y < p[0] ? p[0] : y;
        y = y > p[1] ? p[1] : y;
    } else if (j->act == 2) {
        y = y > 0.0f ? y : p[o] * y;
    } else if (j->act == 3) {
        const float z = y - p[o];
        const float q = z > 0.0f ? z : p[j->O + o] * z;
        y = q + p[2 * j->O + o];
    }
    return y;
}

static inline void store_row(const job_t *j, int64_t n, int64_t o, int64_t oy, int64_t ox0, int64_t lanes,
                             const float *vals) {
    const int64_t at = ((n * j->O + o) * j->OH + oy) * j->OW + ox0;
    const int64_t m = j->OW - ox0 < lanes ? j->OW - ox0 : lanes;
    for (int64_t i = 0; i < m; i++) j->out[at + i] = glue(j, o, vals[i], at + i);
}

/* Scalar body, inlined into a portable and a popcnt-instruction copy: one output pixel per step. */
static inline __attribute__((always_inline)) void block_body(const job_t *j, int64_t n, int64_t oy,
                                                            const rows_t *r, int64_t ox0) {
    const int64_t SW = j->SW, L = j->KH * SW;
    const int64_t m = j->OW - ox0 < 8 ? j->OW - ox0 : 8;
    for (int64_t o = 0; o < j->O; o++) {
        const uint64_t *w = j->wval + o * L, *wm = j->wmask ? j->wmask + o * L : NULL;
        float vals[8];
        for (int64_t i = 0; i < m; i++) {
            const int64_t ox = ox0 + i;
            int32_t cnt = 0, pop = 0;
            for (int64_t k = 0; k < r->nrows; k++) {
                const int64_t ky = r->rows[k] >> 16, iy = r->rows[k] & 0xffff;
                for (int64_t q = 0; q < SW; q++) {
                    const int64_t at = seg_at(j, n, iy, q) + ox;
                    const uint64_t x = j->seg[at] ^ w[ky * SW + q];
                    if (wm) {
                        const uint64_t mm = j->segm[at] & wm[ky * SW + q];
                        cnt += __builtin_popcountll(mm);
                        pop += __builtin_popcountll(mm & x);
                    } else {
                        pop += __builtin_popcountll(x & j->valid[q * j->OWp + ox]);
                    }
                }
            }
            const int32_t acc = wm ? cnt - 2 * pop : j->kcol[ox] * (int32_t)r->nrows - 2 * pop;
            const float scaled = (float)acc * j->mul[o]; /* rounded to float32 here ... */
            vals[i] = scaled + j->add[o];                /* ... and again here: two roundings, never one FMA */
        }
        store_row(j, n, o, oy, ox0, 8, vals);
    }
}

static void block_generic(const job_t *j, int64_t n, int64_t oy, const rows_t *r, int64_t ox0) {
    block_body(j, n, oy, r, ox0);
}

#if ABK_X86
__attribute__((target("popcnt"))) static void block_popcnt(const job_t *j, int64_t n, int64_t oy, const rows_t *r,
                                                            int64_t ox0) {
    block_body(j, n, oy, r, ox0);
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

/* Epilogue results y of output channel o, pixels ox0..ox0+7: + residual, the activation, stored (vector ops, the
 * same IEEE operations as glue()); a partial block at the row's end goes through glue() itself. */
__attribute__((target("avx2"), always_inline)) static inline void store8(const job_t *j, int64_t n, int64_t o,
                                                                         int64_t oy, int64_t ox0, __m256 y) {
    if (j->OW - ox0 < 8) {
        float vals[8];
        _mm256_storeu_ps(vals, y);
        store_row(j, n, o, oy, ox0, 8, vals);
        return;
    }
    const int64_t at = ((n * j->O + o) * j->OH + oy) * j->OW + ox0;
    if (j->residual) y = _mm256_add_ps(y, _mm256_loadu_ps(j->residual + at));
    const float *p = j->act_params;
    const __m256 zero = _mm256_setzero_ps();
    if (j->act == 1) {
        y = _mm256_blendv_ps(y, _mm256_set1_ps(p[0]), _mm256_cmp_ps(y, _mm256_set1_ps(p[0]), _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, _mm256_set1_ps(p[1]), _mm256_cmp_ps(y, _mm256_set1_ps(p[1]), _CMP_GT_OQ));
    } else if (j->act == 2) {
        const __m256 sl = _mm256_mul_ps(_mm256_set1_ps(p[o]), y);
        y = _mm256_blendv_ps(sl, y, _mm256_cmp_ps(y, zero, _CMP_GT_OQ));
    } else if (j->act == 3) {
        const __m256 z = _mm256_sub_ps(y, _mm256_set1_ps(p[o]));
        const __m256 sl = _mm256_mul_ps(_mm256_set1_ps(p[j->O + o]), z);
        y = _mm256_add_ps(_mm256_blendv_ps(sl, z, _mm256_cmp_ps(z, zero, _CMP_GT_OQ)), _mm256_set1_ps(p[2 * j->O + o]));
    }
    _mm256_storeu_ps(j->out + at, y);
}

/* Dense channels of one AVX2 block, inlined with a constant word count nl <= 31 (byte counters cannot overflow):
 * pixels 0-3 in the *0 vectors, 4-7 in the *1 vectors. */
__attribute__((target("avx2"), always_inline)) static inline void block_avx2_dense(
    const job_t *j, int64_t n, int64_t oy, int64_t ox0, const __m256i *a0, const __m256i *a1, const __m256i *v0,
    const __m256i *v1, const int64_t *widx, const int64_t nl, const __m256i kv) {
    const int64_t L = j->KH * j->SW;
    const __m256i zero = _mm256_setzero_si256(), idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    for (int64_t o = 0; o < j->O; o++) {
        const uint64_t *w = j->wval + o * L;
        __m256i b0 = zero, b1 = zero;
        for (int64_t l = 0; l < nl; l++) {
            const __m256i ww = _mm256_set1_epi64x((long long)w[widx[l]]);
            b0 = _mm256_add_epi8(b0, popcnt8(_mm256_and_si256(_mm256_xor_si256(a0[l], ww), v0[l])));
            b1 = _mm256_add_epi8(b1, popcnt8(_mm256_and_si256(_mm256_xor_si256(a1[l], ww), v1[l])));
        }
        const __m128i p0 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_sad_epu8(b0, zero), idx));
        const __m128i p1 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_sad_epu8(b1, zero), idx));
        const __m256i p32 = _mm256_inserti128_si256(_mm256_castsi128_si256(p0), p1, 1);
        const __m256i acc = _mm256_sub_epi32(kv, _mm256_add_epi32(p32, p32));
        const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(j->mul[o]));
        store8(j, n, o, oy, ox0, _mm256_add_ps(scaled, _mm256_set1_ps(j->add[o]))); /* two roundings */
    }
}

/* 8 output pixels as two vectors of 4; byte counters summed into 64-bit lanes every 31 words (255 max). */
__attribute__((target("avx2"))) static void block_avx2(const job_t *j, int64_t n, int64_t oy, const rows_t *r,
                                                       int64_t ox0) {
    const int64_t SW = j->SW, L = j->KH * SW;
    const __m256i zero = _mm256_setzero_si256();
    __m256i a0[ABK_MAX_WORDS], a1[ABK_MAX_WORDS], v0[ABK_MAX_WORDS], v1[ABK_MAX_WORDS]; /* the patch words */
    int64_t widx[ABK_MAX_WORDS];
    int64_t nl = 0;
    for (int64_t k = 0; k < r->nrows; k++) {
        const int64_t ky = r->rows[k] >> 16, iy = r->rows[k] & 0xffff;
        for (int64_t q = 0; q < SW; q++, nl++) {
            const int64_t at = seg_at(j, n, iy, q) + ox0;
            widx[nl] = ky * SW + q;
            a0[nl] = _mm256_loadu_si256((const __m256i *)(j->seg + at));
            a1[nl] = _mm256_loadu_si256((const __m256i *)(j->seg + at + 4));
            if (j->wmask) {
                v0[nl] = _mm256_loadu_si256((const __m256i *)(j->segm + at));
                v1[nl] = _mm256_loadu_si256((const __m256i *)(j->segm + at + 4));
            } else {
                v0[nl] = _mm256_loadu_si256((const __m256i *)(j->valid + q * j->OWp + ox0));
                v1[nl] = _mm256_loadu_si256((const __m256i *)(j->valid + q * j->OWp + ox0 + 4));
            }
        }
    }
    if (!j->wmask && nl <= 31) {
        const __m256i kv8 = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(j->kcol + ox0)),
                                               _mm256_set1_epi32((int)r->nrows));
        switch (nl) {
        case 1: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, 1, kv8); return;
        case 2: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, 2, kv8); return;
        case 3: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, 3, kv8); return;
        case 6: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, 6, kv8); return;
        case 9: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, 9, kv8); return;
        default: block_avx2_dense(j, n, oy, ox0, a0, a1, v0, v1, widx, nl, kv8); return;
        }
    }
    int64_t kv[8];
    for (int i = 0; i < 8; i++) kv[i] = (int64_t)j->kcol[ox0 + i] * r->nrows;
    for (int64_t o = 0; o < j->O; o++) {
        const uint64_t *w = j->wval + o * L, *wm = j->wmask ? j->wmask + o * L : NULL;
        __m256i p0 = zero, p1 = zero, c0 = zero, c1 = zero;
        for (int64_t l0 = 0; l0 < nl; l0 += 31) {
            const int64_t l1 = l0 + 31 < nl ? l0 + 31 : nl;
            __m256i b0 = zero, b1 = zero, d0 = zero, d1 = zero;
            for (int64_t l = l0; l < l1; l++) {
                const int64_t wi = widx[l];
                const __m256i ww = _mm256_set1_epi64x((long long)w[wi]);
                __m256i m0 = v0[l], m1 = v1[l];
                if (wm) {
                    const __m256i wmv = _mm256_set1_epi64x((long long)wm[wi]);
                    m0 = _mm256_and_si256(m0, wmv);
                    m1 = _mm256_and_si256(m1, wmv);
                    d0 = _mm256_add_epi8(d0, popcnt8(m0));
                    d1 = _mm256_add_epi8(d1, popcnt8(m1));
                }
                b0 = _mm256_add_epi8(b0, popcnt8(_mm256_and_si256(_mm256_xor_si256(a0[l], ww), m0)));
                b1 = _mm256_add_epi8(b1, popcnt8(_mm256_and_si256(_mm256_xor_si256(a1[l], ww), m1)));
            }
            p0 = _mm256_add_epi64(p0, _mm256_sad_epu8(b0, zero));
            p1 = _mm256_add_epi64(p1, _mm256_sad_epu8(b1, zero));
            c0 = _mm256_add_epi64(c0, _mm256_sad_epu8(d0, zero));
            c1 = _mm256_add_epi64(c1, _mm256_sad_epu8(d1, zero));
        }
        int64_t pp[8], cc[8];
        _mm256_storeu_si256((__m256i *)pp, p0);
        _mm256_storeu_si256((__m256i *)(pp + 4), p1);
        _mm256_storeu_si256((__m256i *)cc, c0);
        _mm256_storeu_si256((__m256i *)(cc + 4), c1);
        int32_t acc[8];
        for (int i = 0; i < 8; i++) acc[i] = (int32_t)((wm ? cc[i] : kv[i]) - 2 * pp[i]);
        const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)acc)),
                                            _mm256_set1_ps(j->mul[o]));
        store8(j, n, o, oy, ox0, _mm256_add_ps(scaled, _mm256_set1_ps(j->add[o]))); /* two roundings */
    }
}

/* Every output channel of one block; inlined with a constant word count nl, so the block's patch stays in
 * registers across output channels. */
__attribute__((target("avx512f,avx512vpopcntdq,avx2"), always_inline)) static inline void block_avx512_channels(
    const job_t *j, int64_t n, int64_t oy, int64_t ox0, const __m512i *a, const __m512i *v, const int64_t *widx,
    const int64_t nl, const __m256i kv) {
    const int64_t L = j->KH * j->SW;
    for (int64_t o = 0; o < j->O; o++) {
        const uint64_t *w = j->wval + o * L;
        __m512i pop = _mm512_setzero_si512();
        __m256i acc;
        if (j->wmask) {
            const uint64_t *wm = j->wmask + o * L;
            __m512i cnt = _mm512_setzero_si512();
            for (int64_t l = 0; l < nl; l++) {
                const __m512i m = _mm512_and_si512(v[l], _mm512_set1_epi64((long long)wm[widx[l]]));
                const __m512i x = _mm512_xor_si512(a[l], _mm512_set1_epi64((long long)w[widx[l]]));
                cnt = _mm512_add_epi64(cnt, _mm512_popcnt_epi64(m));
                pop = _mm512_add_epi64(pop, _mm512_popcnt_epi64(_mm512_and_si512(m, x)));
            }
            acc = _mm512_cvtepi64_epi32(_mm512_sub_epi64(cnt, _mm512_add_epi64(pop, pop)));
        } else {
            for (int64_t l = 0; l < nl; l++) {
                /* (a XOR w) AND valid in one instruction: truth table 0x28 of (a, w, valid) */
                const __m512i x = _mm512_ternarylogic_epi64(a[l], _mm512_set1_epi64((long long)w[widx[l]]), v[l],
                                                            0x28);
                pop = _mm512_add_epi64(pop, _mm512_popcnt_epi64(x));
            }
            const __m256i p32 = _mm512_cvtepi64_epi32(pop);
            acc = _mm256_sub_epi32(kv, _mm256_add_epi32(p32, p32));
        }
        const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_set1_ps(j->mul[o]));
        __m256 y = _mm256_add_ps(scaled, _mm256_set1_ps(j->add[o])); /* two roundings, never one FMA */
        store8(j, n, o, oy, ox0, y);
    }
}

/* 8 output pixels per vector, VPOPCNTQ. */
__attribute__((target("avx512f,avx512vpopcntdq,avx2"))) static void block_avx512(const job_t *j, int64_t n,
                                                                                  int64_t oy, const rows_t *r,
                                                                                  int64_t ox0) {
    const int64_t SW = j->SW;
    __m512i a[ABK_MAX_WORDS], v[ABK_MAX_WORDS];
    int64_t widx[ABK_MAX_WORDS];
    int64_t nl = 0;
    for (int64_t k = 0; k < r->nrows; k++) {
        const int64_t ky = r->rows[k] >> 16, iy = r->rows[k] & 0xffff;
        for (int64_t q = 0; q < SW; q++, nl++) {
            const int64_t at = seg_at(j, n, iy, q) + ox0;
            a[nl] = _mm512_loadu_si512((const void *)(j->seg + at));
            v[nl] = j->wmask ? _mm512_loadu_si512((const void *)(j->segm + at))
                             : _mm512_loadu_si512((const void *)(j->valid + q * j->OWp + ox0));
            widx[nl] = ky * SW + q;
        }
    }
    const __m256i kv = _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(j->kcol + ox0)),
                                          _mm256_set1_epi32((int)r->nrows));
    switch (nl) { /* constant word counts of ResNet layers (3x3: 3 for C <= 21, 6 for C <= 42, 9 for C <= 64) */
    case 1: block_avx512_channels(j, n, oy, ox0, a, v, widx, 1, kv); break;
    case 2: block_avx512_channels(j, n, oy, ox0, a, v, widx, 2, kv); break;
    case 3: block_avx512_channels(j, n, oy, ox0, a, v, widx, 3, kv); break;
    case 4: block_avx512_channels(j, n, oy, ox0, a, v, widx, 4, kv); break;
    case 6: block_avx512_channels(j, n, oy, ox0, a, v, widx, 6, kv); break;
    case 9: block_avx512_channels(j, n, oy, ox0, a, v, widx, 9, kv); break;
    default: block_avx512_channels(j, n, oy, ox0, a, v, widx, nl, kv); break;
    }
}
#endif

typedef void (*block_fn)(const job_t *, int64_t, int64_t, const rows_t *, int64_t);

static void conv_row(const job_t *j, int64_t n, int64_t oy, block_fn block) {
    rows_t r;
    r.nrows = 0;
    for (int64_t ky = 0; ky < j->KH; ky++) {
        const int64_t iy = oy * j->sh - j->ph + ky;
        if (iy >= 0 && iy < j->H) r.rows[r.nrows++] = (ky << 16) | iy;
        else if (j->pad_value != 0) r.rows[r.nrows++] = (ky << 16) | j->H; /* the pad row */
    }
    for (int64_t ox0 = 0; ox0 < j->OW; ox0 += 8) block(j, n, oy, &r, ox0);
}

/* ---- threads ------------------------------------------------------------------------------------------------ */

typedef struct {
    const job_t *job;
    int64_t begin, end;
    int phase; /* 0: pack and segment images [begin, end); 1: convolve (image, row) units [begin, end);
                  2: images [begin, end) whole (pack, segment, convolve) in the thread's own one-image scratch */
    int rc;
} slice_t;

static block_fn pick_block(const job_t *j) {
#if ABK_X86
    if (j->isa == ISA_AVX512) return block_avx512;
    if (j->isa == ISA_AVX2) return block_avx2;
    if (cpu_has(ISA_SCALAR)) return block_popcnt;
#endif
    (void)j;
    return block_generic;
}

/* Phase 2: each image packed, segmented and convolved by one thread while its bits are still in cache; the scratch
 * holds one image, so a batch costs no more memory than a single image per thread. */
static int run_images(const job_t *shared, int64_t begin, int64_t end) {
    job_t j = *shared;
    const size_t pix = (size_t)(j.H * j.W * j.nw), segs = (size_t)((j.H + 1) * j.SW * j.OWp);
    j.per_image = 1;
    j.val = malloc(pix * sizeof(uint64_t));
    j.mask = j.masked ? malloc(pix * sizeof(uint64_t)) : NULL;
    j.seg = malloc(segs * sizeof(uint64_t));
    j.segm = j.masked ? malloc(segs * sizeof(uint64_t)) : NULL;
    uint64_t *tmp = calloc((size_t)(j.SW + 1), sizeof(uint64_t)), *tmpm = calloc((size_t)(j.SW + 1), sizeof(uint64_t));
    int rc = -2;
    if (j.val && j.seg && tmp && tmpm && (!j.masked || (j.mask && j.segm))) {
        const block_fn block = pick_block(&j);
        for (int64_t n = begin; n < end; n++) {
            pack_image(&j, n);
            build_segments(&j, n, tmp, tmpm);
            for (int64_t oy = 0; oy < j.OH; oy++) conv_row(&j, n, oy, block);
        }
        rc = 0;
    }
    free(j.val); free(j.mask); free(j.seg); free(j.segm); free(tmp); free(tmpm);
    return rc;
}

static void *run_slice(void *arg) {
    slice_t *sl = (slice_t *)arg;
    const job_t *j = sl->job;
    sl->rc = 0;
    if (sl->phase == 2) {
        sl->rc = run_images(j, sl->begin, sl->end);
        return NULL;
    }
    if (sl->phase == 0) {
        uint64_t *tmp = calloc((size_t)(j->SW + 1), sizeof(uint64_t));
        uint64_t *tmpm = calloc((size_t)(j->SW + 1), sizeof(uint64_t));
        if (!tmp || !tmpm) sl->rc = -2;
        else
            for (int64_t n = sl->begin; n < sl->end; n++) {
                pack_image(j, n);
                build_segments(j, n, tmp, tmpm);
            }
        free(tmp); free(tmpm);
        return NULL;
    }
    const block_fn block = pick_block(j);
    for (int64_t u = sl->begin; u < sl->end; u++) conv_row(j, u / j->OH, u % j->OH, block);
    return NULL;
}

/* The host's OpenMP runtime, where Python found one (arbibench/deploy/threads.py passes torch's libgomp): its
 * GOMP_parallel and thread-number functions, the stable libgomp ABI that Intel's and LLVM's runtimes also export.
 * Torch's own OpenMP workers then run the slices. They spin for milliseconds after every torch operation, so on a
 * machine with as many cores as threads, threads of our own would share the cores with them; these workers are
 * already awake. NULL: threads started for the call (pthreads). */
typedef void (*omp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_int_fn)(void);
static omp_parallel_fn omp_parallel;
static omp_int_fn omp_thread_num, omp_num_threads;

int abk_use_openmp(void *parallel, void *thread_num, void *num_threads) {
    if (!parallel || !thread_num || !num_threads) {
        omp_parallel = NULL;
        return 0;
    }
    memcpy(&omp_thread_num, &thread_num, sizeof thread_num); /* POSIX: a dlsym address is a function pointer */
    memcpy(&omp_num_threads, &num_threads, sizeof num_threads);
    memcpy(&omp_parallel, &parallel, sizeof parallel);
    return 1;
}

typedef struct {
    slice_t *sl;
    int n;
} omp_run_t;

static void omp_body(void *arg) {
    const omp_run_t *r = (const omp_run_t *)arg;
    const int team = omp_num_threads(), me = omp_thread_num();
    for (int t = me; t < r->n; t += team) run_slice(&r->sl[t]); /* a smaller team than asked still covers all */
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
    if (threads == 1) {
        run_slice(&sl[0]);
    } else if (omp_parallel) {
        omp_run_t r = {sl, threads};
        omp_parallel(omp_body, &r, (unsigned)threads, 0);
    } else {
        for (int t = 1; t < threads; t++) started[t] = pthread_create(&tid[t], NULL, run_slice, &sl[t]) == 0;
        run_slice(&sl[0]);
        for (int t = 1; t < threads; t++) {
            if (started[t]) pthread_join(tid[t], NULL);
            else run_slice(&sl[t]); /* no thread to spare: this one does the slice */
        }
    }
    for (int t = 0; t < threads; t++)
        if (sl[t].rc) return sl[t].rc;
    return 0;
}

/*
 * The whole binary convolution: x float32 [N][C][H][W] (compared with thresh, or 0) -> out float32 [N][O][OH][OW].
 * Weights as arbibench/deploy/kernel.py packs them: [O][KH * SW] words, SW = ceil(KW * C / 64).
 * Returns the instruction set used (1 scalar, 2 avx2, 3 avx512), or < 0: -1 the requested instruction set is
 * missing, -2 out of memory, -3 bad arguments.
 */
int abk_binary_conv2d(const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int alphabet,
                      const uint64_t *wval, const uint64_t *wmask, int64_t O, int64_t KH, int64_t KW, int64_t sh,
                      int64_t sw, int64_t ph, int64_t pw, int pad_value, const float *mul, const float *add,
                      const float *thresh, const float *residual, int act, const float *act_params, float *out,
                      int64_t OH, int64_t OW, int threads, int isa_request) {
    job_t j;
    if (N < 0 || C < 1 || H < 1 || W < 1 || O < 1 || KH < 1 || KW < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 ||
        alphabet < 0 || alphabet > 2 || pad_value < -1 || pad_value > 1 || KH > 64 || H > 0xffff || act < 0 ||
        act > 3 || (act && !act_params))
        return -3;
    if (OH != (H + 2 * ph - KH) / sh + 1 || OW != (W + 2 * pw - KW) / sw + 1 || OH < 1 || OW < 1) return -3;
    const int isa = abk_resolve_isa(isa_request);
    if (isa < 0) return -1;
    if (N == 0) return isa;
    memset(&j, 0, sizeof j);
    j.x = x; j.N = N; j.C = C; j.H = H; j.W = W; j.nw = (C + 63) / 64; j.alphabet = alphabet;
    j.wval = wval; j.wmask = wmask;
    j.O = O; j.KH = KH; j.KW = KW; j.sh = sh; j.sw = sw; j.ph = ph; j.pw = pw; j.OH = OH; j.OW = OW;
    j.OWp = (OW + 7) / 8 * 8;
    j.SW = (KW * C + 63) / 64;
    j.pad_value = pad_value; j.masked = wmask != NULL; j.isa = isa;
    j.mul = mul; j.add = add; j.out = out;
    j.thresh = thresh; j.residual = residual; j.act = act; j.act_params = act_params;
    if (alphabet != 0 && !j.masked) return -3; /* a mask on the input needs the masked kernel (and a weight mask) */
    if (KH * j.SW > ABK_MAX_WORDS) return -3;
    /* a thread costs tens of microseconds to start: each one gets at least ABK_WORK_PER_THREAD word operations */
    const int64_t work = N * OH * j.OWp * O * KH * j.SW;
    const int64_t useful = work / ABK_WORK_PER_THREAD > 1 ? work / ABK_WORK_PER_THREAD : 1;
    if (threads > useful) threads = (int)useful;
    if (threads < 1) threads = 1;
    /* As many images as threads (the usual batch): whole images per thread, one-image scratch each. Fewer (a single
     * image on several threads): every image packed and segmented first, then its rows shared out. */
    const int whole_images = N >= threads;
    if (!whole_images) {
        const size_t segs = (size_t)(N * (H + 1) * j.SW * j.OWp);
        j.val = malloc((size_t)(N * H * W * j.nw) * sizeof(uint64_t));
        j.mask = j.masked ? malloc((size_t)(N * H * W * j.nw) * sizeof(uint64_t)) : NULL;
        j.seg = malloc(segs * sizeof(uint64_t)); /* every word read is written first (build_segments, tail lanes) */
        j.segm = j.masked ? malloc(segs * sizeof(uint64_t)) : NULL;
    }
    j.valid = calloc((size_t)(j.SW * j.OWp), sizeof(uint64_t));
    j.kcol = calloc((size_t)j.OWp, sizeof(int32_t));
    j.ones = calloc((size_t)(j.nw + 1), sizeof(uint64_t));
    int rc = -2;
    const int scratch = whole_images || (j.val && j.seg && (!j.masked || (j.mask && j.segm)));
    if (scratch && j.valid && j.kcol && j.ones) {
        for (int64_t c = 0; c < C; c++) j.ones[c >> 6] |= (uint64_t)1 << (c & 63);
        for (int64_t ox = 0; ox < OW; ox++) {
            int64_t inside = 0;
            for (int64_t kx = 0; kx < KW; kx++) {
                const int64_t ix = ox * sw - pw + kx;
                const int counts = pad_value != 0 || (ix >= 0 && ix < W);
                inside += counts;
                if (!counts) continue;
                for (int64_t c = 0; c < C; c++) {
                    const int64_t bit = kx * C + c;
                    j.valid[(bit >> 6) * j.OWp + ox] |= (uint64_t)1 << (bit & 63);
                }
            }
            j.kcol[ox] = (int32_t)(C * inside);
        }
        if (whole_images) {
            rc = run_phase(&j, 2, N, threads);
        } else {
            rc = run_phase(&j, 0, N, threads);
            if (rc == 0) rc = run_phase(&j, 1, N * OH, threads);
        }
    }
    free(j.val); free(j.mask); free(j.seg); free(j.segm); free(j.valid); free(j.kcol); free(j.ones);
    return rc ? rc : isa;
}
