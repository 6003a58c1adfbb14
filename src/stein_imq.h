/* Template, included by stein.c once per vector width (no include guard):
 * the Stein kernel of the IMQ kernel with beta = -1/2, SV_W points at a
 * time, each point's sums and phi kept in registers.  stein_block_body()'s
 * operations in its order (the same results), without its passes over the
 * block's arrays, which cost more loads and stores than the arithmetic.
 * The includer defines SV_NAME (the function), SV_TARGET, SV_T (the vector
 * type), SV_W (its lanes), SV_LOADU, SV_STOREU, SV_SET1, SV_ADD, SV_SUB,
 * SV_MUL and SV_IMQ (kernels.h's kb_imq_half4/8); they are undefined here
 * at the end. */

/* d is a constant where inlined with one (the point's coordinates then stay
 * in registers).  Returns the number of points done (a multiple of SV_W). */
#define SV_CAT_(a, b) a##b
#define SV_CAT(a, b) SV_CAT_(a, b)
#define SV_BODY SV_CAT(SV_NAME, _body)
SV_TARGET static KB_ALWAYS_INLINE int
SV_BODY(const kb_kernel *K, const double *x, const double *s,
        const kb_points *P, R_xlen_t j0, int m, double *out, const int d,
        const int iso)
{
    const R_xlen_t ld = P->ld;
    const double *X = P->X + j0, *S = P->S + j0;
    SV_T xb[KB_STEIN_DMAX], sb[KB_STEIN_DMAX], lb[KB_STEIN_DMAX];
    for (int k = 0; k < d; k++) {
        xb[k] = SV_SET1(x[k]);
        sb[k] = SV_SET1(s[k]);
        if (!iso)
            lb[k] = SV_SET1(K->lam[k]);
    }
    const SV_T zero = SV_SET1(0.0), l = SV_SET1(K->lam[0]),
        c = SV_SET1(K->c), b1 = SV_SET1(K->beta),
        b2 = SV_SET1(K->beta * (K->beta - 1.0)), trL = SV_SET1(K->trL),
        two = SV_SET1(2.0), four = SV_SET1(4.0);
    int t = 0;
    for (; t + SV_W <= m; t += SV_W) {
        SV_T r = zero, a = zero, b = zero, sd = zero;
#pragma GCC unroll 4
        for (int k = 0; k < d; k++) {
            SV_T xk = SV_LOADU(X + k * ld + t), sk = SV_LOADU(S + k * ld + t);
            SV_T u = SV_SUB(xb[k], xk), v = SV_SUB(sk, sb[k]);
            if (iso) {
                r = SV_ADD(r, SV_MUL(u, u));
                a = SV_ADD(a, SV_MUL(u, v));
            } else {
                SV_T lu = SV_MUL(lb[k], u);
                r = SV_ADD(r, SV_MUL(lu, u));
                a = SV_ADD(a, SV_MUL(lu, v));
                b = SV_ADD(b, SV_MUL(lu, lu));
            }
            sd = SV_ADD(sd, SV_MUL(sb[k], sk));
        }
        if (iso) {
            r = SV_MUL(r, l);
            a = SV_MUL(a, l);
            b = SV_MUL(l, r);
        }
        SV_T p0, p1, p2;
        SV_IMQ(c, b1, b2, r, &p0, &p1, &p2);
        SV_T o = SV_ADD(SV_MUL(sd, p0),
                        SV_MUL(SV_MUL(two, p1), SV_SUB(a, trL)));
        SV_STOREU(out + t, SV_SUB(o, SV_MUL(SV_MUL(four, p2), b)));
    }
    return t;
}

/* d = 4 (and iso) as constants: the common case gets its own copy */
SV_TARGET static int SV_NAME(const kb_kernel *K, const double *x,
                             const double *s, const kb_points *P,
                             R_xlen_t j0, int m, double *out)
{
    if (K->d == 4)
        return K->iso ? SV_BODY(K, x, s, P, j0, m, out, 4, 1) :
            SV_BODY(K, x, s, P, j0, m, out, 4, 0);
    return K->iso ? SV_BODY(K, x, s, P, j0, m, out, K->d, 1) :
        SV_BODY(K, x, s, P, j0, m, out, K->d, 0);
}

#undef SV_BODY
#undef SV_CAT
#undef SV_CAT_
#undef SV_NAME
#undef SV_TARGET
#undef SV_T
#undef SV_W
#undef SV_LOADU
#undef SV_STOREU
#undef SV_SET1
#undef SV_ADD
#undef SV_SUB
#undef SV_MUL
#undef SV_IMQ
