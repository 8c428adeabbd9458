// nn.cu: the row kernels of the nn layers: Softmax/LogSoftmax and their
// backward, LayerNorm and its backward, CrossEntropy and its backward. The
// CPU reference is engine/cpu/nn.go with engine/cpu/vmath/rows.go.
//
// Rows are contiguous, n elements each. A row is processed by a group of
// threads, a warp or the whole block (the `group` parameter, see
// ze_group_reduce in common.cuh). Sums accumulate in double, as the CPU's.
// float32 and the 16-bit types compute in float (the CPU widens those to
// float32 and rounds the outputs once); their per-row statistics (LayerNorm
// mean and rstd) are float32.

// ---------------------------------------------------------------------------
// Softmax.

template <class T> __device__ __forceinline__ void ze_softmax(T* dst, const T* src, i64 rows, i64 n, int log, int group) {
    typedef typename ZeType<T>::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        ze_softmax_row<T>(dst + row * n, src + row * n, n, log != 0, lane, group, smax, ssum);
    }
}

template <class T>
__device__ __forceinline__ void ze_softmax_bwd(T* dx, const T* dy, const T* y, i64 rows, i64 n, int log, int group) {
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        ze_softmax_bwd_row<T>(dx + row * n, dy + row * n, y + row * n, n, log != 0, lane, group, ssum);
    }
}

extern "C" __global__ __launch_bounds__(1024) void softmax_f32(float* dst, const float* src, i64 rows, i64 n, int log, int group) {
    ze_softmax(dst, src, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_f64(double* dst, const double* src, i64 rows, i64 n, int log, int group) {
    ze_softmax(dst, src, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_bf16(ze_bf16* dst, const ze_bf16* src, i64 rows, i64 n, int log, int group) {
    ze_softmax(dst, src, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_f16(ze_f16* dst, const ze_f16* src, i64 rows, i64 n, int log, int group) {
    ze_softmax(dst, src, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_bwd_f32(float* dx, const float* dy, const float* y, i64 rows, i64 n, int log, int group) {
    ze_softmax_bwd(dx, dy, y, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_bwd_f64(double* dx, const double* dy, const double* y, i64 rows, i64 n, int log, int group) {
    ze_softmax_bwd(dx, dy, y, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_bwd_bf16(ze_bf16* dx, const ze_bf16* dy, const ze_bf16* y, i64 rows, i64 n, int log, int group) {
    ze_softmax_bwd(dx, dy, y, rows, n, log, group);
}
extern "C" __global__ __launch_bounds__(1024) void softmax_bwd_f16(ze_f16* dx, const ze_f16* dy, const ze_f16* y, i64 rows, i64 n, int log, int group) {
    ze_softmax_bwd(dx, dy, y, rows, n, log, group);
}

// ---------------------------------------------------------------------------
// LayerNorm (vmath.LayerNormRow for float, cpu.layerNormRow64 for double):
//
//	mean = Σx/n (double, then rounded to the stat type)
//	var  = Σ(x − mean)²/n with the deviations rounded to the type
//	rstd = 1/√(max(var, 0) + eps), var and eps in the stat type
//	y    = ((x·rstd) + (−rstd·mean))·w + b   with both w and b
//	y    = (x − mean)·rstd [·w] [+ b]         otherwise
//
// each operation rounded (no contraction). w and b may be null.

__device__ __forceinline__ float ze_ln_rstd(float, double ss, i64 n, double eps) {
    float var = (float)(ss / (double)n);
    if (!(var != var) && !(var > 0.0f)) var = 0.0f;  // Go's max(var, 0): NaN stays
    return ze_div(1.0f, ze_sqrt(ze_add(var, (float)eps)));
}
__device__ __forceinline__ double ze_ln_rstd(double, double ss, i64 n, double eps) {
    double var = ss / (double)n;
    if (!(var != var) && !(var > 0.0)) var = 0.0;
    return 1.0 / sqrt(var + eps);
}
__device__ __forceinline__ float ze_round_mean(float, double m) { return (float)m; }
__device__ __forceinline__ double ze_round_mean(double, double m) { return m; }

template <class T>
__device__ __forceinline__ void ze_layernorm(T* dst, typename ZeType<T>::C* mean, typename ZeType<T>::C* rstd, const T* x,
                                             const T* w, const T* b, i64 rows, i64 n, double eps, int group) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        const T* xr = x + row * n;
        T* yr = dst + row * n;
        double acc = 0.0;
        for (i64 j = lane; j < n; j += group) acc += (double)Ty::load(xr[j]);
        acc = ze_group_reduce(acc, group, ssum, ZeSum());
        const C mu = ze_round_mean((C)0, acc / (double)n);
        double ss = 0.0;
        for (i64 j = lane; j < n; j += group) {
            const double d = (double)ze_sub(Ty::load(xr[j]), mu);
            ss += d * d;
        }
        ss = ze_group_reduce(ss, group, ssum, ZeSum());
        const C rs = ze_ln_rstd((C)0, ss, n, eps);
        if (w != 0 && b != 0) {
            const C shift = ze_mul(-rs, mu);
            for (i64 j = lane; j < n; j += group) {
                const C t = ze_add(ze_mul(Ty::load(xr[j]), rs), shift);
                yr[j] = Ty::store(ze_add(ze_mul(t, Ty::load(w[j])), Ty::load(b[j])));
            }
        } else {
            for (i64 j = lane; j < n; j += group) {
                C t = ze_mul(ze_sub(Ty::load(xr[j]), mu), rs);
                if (w != 0) t = ze_mul(t, Ty::load(w[j]));
                if (b != 0) t = ze_add(t, Ty::load(b[j]));
                yr[j] = Ty::store(t);
            }
        }
        if (lane == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
    }
}

// ---------------------------------------------------------------------------
// LayerNorm backward, dx (vmath.LayerNormBackwardRow, layerNormBackwardRow64):
//
//	g  = dy·w (or dy);  ds = Σ g·x,  dbs = Σ g   (double)
//	b  = (dbs·mean − ds)·rstd³/n,  c = −b·mean − dbs·rstd/n
//	dx = rstd·g + b·x + c
//
// float rounds ds and dbs to float and follows vmath's steps (b·x + rstd·g
// fused); double follows the float64 loop.

__device__ __forceinline__ void ze_ln_coeffs(double ds, double dbs, float mu, float rs, i64 n, float& bb, float& cc) {
    const float scale = ze_div(1.0f, (float)n);
    const float dsf = (float)ds, dbf = (float)dbs;
    bb = ze_mul(ze_mul(ze_mul(ze_mul(ze_sub(ze_mul(dbf, mu), dsf), rs), rs), rs), scale);
    cc = ze_sub(ze_mul(-bb, mu), ze_mul(ze_mul(dbf, rs), scale));
}
__device__ __forceinline__ void ze_ln_coeffs(double ds, double dbs, double mu, double rs, i64 n, double& bb, double& cc) {
    const double scale = 1.0 / (double)n;
    bb = ze_mul(ze_mul(ze_mul(ze_mul(ze_sub(ze_mul(dbs, mu), ds), rs), rs), rs), scale);
    cc = ze_sub(ze_mul(-bb, mu), ze_mul(ze_mul(dbs, rs), scale));
}
// g is dy·w (or dy).
__device__ __forceinline__ float ze_ln_dx(float g, float x, float rs, float bb, float cc) {
    return ze_add(fmaf(bb, x, ze_mul(g, rs)), cc);
}
__device__ __forceinline__ double ze_ln_dx(double g, double x, double rs, double bb, double cc) {
    return ze_add(ze_add(ze_mul(rs, g), ze_mul(bb, x)), cc);
}

template <class T>
__device__ __forceinline__ void ze_layernorm_bwd_dx(T* dx, const T* dy, const T* x, const typename ZeType<T>::C* mean,
                                                    const typename ZeType<T>::C* rstd, const T* w, i64 rows, i64 n,
                                                    int group) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    __shared__ double ssum[32];
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        const T* gy = dy + row * n;
        const T* xr = x + row * n;
        T* gx = dx + row * n;
        double ds = 0.0, dbs = 0.0;
        for (i64 j = lane; j < n; j += group) {
            C g = Ty::load(gy[j]);
            if (w != 0) g = ze_mul(g, Ty::load(w[j]));
            ds += (double)g * (double)Ty::load(xr[j]);
            dbs += (double)g;
        }
        ds = ze_group_reduce(ds, group, ssum, ZeSum());
        dbs = ze_group_reduce(dbs, group, ssum, ZeSum());
        const C mu = mean[row], rs = rstd[row];
        C bb, cc;
        ze_ln_coeffs(ds, dbs, mu, rs, n, bb, cc);
        for (i64 j = lane; j < n; j += group) {
            C g = Ty::load(gy[j]);
            if (w != 0) g = ze_mul(g, Ty::load(w[j]));
            gx[j] = Ty::store(ze_ln_dx(g, Ty::load(xr[j]), rs, bb, cc));
        }
    }
}

// LayerNorm backward, dw and db: column sums over the rows,
//
//	dw[j] = Σ_r dy·((x·rstd) + (−rstd·mean))   (float steps, vmath)
//	dw[j] = Σ_r (dy·(x − mean))·rstd            (double)
//	db[j] = Σ_r dy
//
// in two deterministic passes: layernorm_bwd_dwdb writes the double partial
// sums of each chunk of `chunk` rows (blockIdx.y) for each column into
// pw[c*n + j] and pb[c*n + j]; layernorm_bwd_finish adds the partials in
// chunk order. Either of pw/pb (and dw/db) may be null.
__device__ __forceinline__ double ze_ln_dw_term(float g, float x, float mu, float rs) {
    return (double)ze_mul(ze_add(ze_mul(x, rs), ze_mul(-rs, mu)), g);
}
__device__ __forceinline__ double ze_ln_dw_term(double g, double x, double mu, double rs) {
    return ze_mul(ze_mul(g, ze_sub(x, mu)), rs);
}

template <class T>
__device__ __forceinline__ void ze_layernorm_bwd_dwdb(double* pw, double* pb, const T* dy, const T* x,
                                                      const typename ZeType<T>::C* mean, const typename ZeType<T>::C* rstd,
                                                      i64 rows, i64 n, i64 chunk) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    const i64 c = blockIdx.y;
    const i64 r0 = c * chunk;
    const i64 r1 = ze_min(r0 + chunk, rows);
    for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (i64)blockDim.x * gridDim.x) {
        double aw = 0.0, ab = 0.0;
        for (i64 r = r0; r < r1; ++r) {
            const C g = Ty::load(dy[r * n + j]);
            if (pw != 0) aw += ze_ln_dw_term(g, Ty::load(x[r * n + j]), mean[r], rstd[r]);
            ab += (double)g;
        }
        if (pw != 0) pw[c * n + j] = aw;
        if (pb != 0) pb[c * n + j] = ab;
    }
}

template <class T>
__device__ __forceinline__ void ze_layernorm_bwd_finish(T* dw, T* db, const double* pw, const double* pb, i64 n, i64 chunks) {
    ZE_GRID_LOOP(j, n) {
        if (dw != 0) {
            double s = 0.0;
            for (i64 c = 0; c < chunks; ++c) s += pw[c * n + j];
            dw[j] = ZeAcc<T>::out(s);
        }
        if (db != 0) {
            double s = 0.0;
            for (i64 c = 0; c < chunks; ++c) s += pb[c * n + j];
            db[j] = ZeAcc<T>::out(s);
        }
    }
}

extern "C" __global__ __launch_bounds__(1024) void layernorm_f32(float* dst, float* mean, float* rstd, const float* x, const float* w, const float* b,
                                      i64 rows, i64 n, double eps, int group) {
    ze_layernorm(dst, mean, rstd, x, w, b, rows, n, eps, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_f64(double* dst, double* mean, double* rstd, const double* x, const double* w, const double* b,
                                      i64 rows, i64 n, double eps, int group) {
    ze_layernorm(dst, mean, rstd, x, w, b, rows, n, eps, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_bf16(ze_bf16* dst, float* mean, float* rstd, const ze_bf16* x, const ze_bf16* w, const ze_bf16* b,
                                      i64 rows, i64 n, double eps, int group) {
    ze_layernorm(dst, mean, rstd, x, w, b, rows, n, eps, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_f16(ze_f16* dst, float* mean, float* rstd, const ze_f16* x, const ze_f16* w, const ze_f16* b,
                                      i64 rows, i64 n, double eps, int group) {
    ze_layernorm(dst, mean, rstd, x, w, b, rows, n, eps, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_bwd_dx_f32(float* dx, const float* dy, const float* x, const float* mean, const float* rstd,
                                             const float* w, i64 rows, i64 n, int group) {
    ze_layernorm_bwd_dx(dx, dy, x, mean, rstd, w, rows, n, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_bwd_dx_f64(double* dx, const double* dy, const double* x, const double* mean, const double* rstd,
                                             const double* w, i64 rows, i64 n, int group) {
    ze_layernorm_bwd_dx(dx, dy, x, mean, rstd, w, rows, n, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_bwd_dx_bf16(ze_bf16* dx, const ze_bf16* dy, const ze_bf16* x, const float* mean, const float* rstd,
                                             const ze_bf16* w, i64 rows, i64 n, int group) {
    ze_layernorm_bwd_dx(dx, dy, x, mean, rstd, w, rows, n, group);
}
extern "C" __global__ __launch_bounds__(1024) void layernorm_bwd_dx_f16(ze_f16* dx, const ze_f16* dy, const ze_f16* x, const float* mean, const float* rstd,
                                             const ze_f16* w, i64 rows, i64 n, int group) {
    ze_layernorm_bwd_dx(dx, dy, x, mean, rstd, w, rows, n, group);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_dwdb_f32(double* pw, double* pb, const float* dy, const float* x, const float* mean,
                                               const float* rstd, i64 rows, i64 n, i64 chunk) {
    ze_layernorm_bwd_dwdb(pw, pb, dy, x, mean, rstd, rows, n, chunk);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_dwdb_f64(double* pw, double* pb, const double* dy, const double* x, const double* mean,
                                               const double* rstd, i64 rows, i64 n, i64 chunk) {
    ze_layernorm_bwd_dwdb(pw, pb, dy, x, mean, rstd, rows, n, chunk);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_dwdb_bf16(double* pw, double* pb, const ze_bf16* dy, const ze_bf16* x, const float* mean,
                                               const float* rstd, i64 rows, i64 n, i64 chunk) {
    ze_layernorm_bwd_dwdb(pw, pb, dy, x, mean, rstd, rows, n, chunk);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_dwdb_f16(double* pw, double* pb, const ze_f16* dy, const ze_f16* x, const float* mean,
                                               const float* rstd, i64 rows, i64 n, i64 chunk) {
    ze_layernorm_bwd_dwdb(pw, pb, dy, x, mean, rstd, rows, n, chunk);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_finish_f32(float* dw, float* db, const double* pw, const double* pb, i64 n, i64 chunks) {
    ze_layernorm_bwd_finish(dw, db, pw, pb, n, chunks);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_finish_f64(double* dw, double* db, const double* pw, const double* pb, i64 n, i64 chunks) {
    ze_layernorm_bwd_finish(dw, db, pw, pb, n, chunks);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_finish_bf16(ze_bf16* dw, ze_bf16* db, const double* pw, const double* pb, i64 n, i64 chunks) {
    ze_layernorm_bwd_finish(dw, db, pw, pb, n, chunks);
}
extern "C" __global__ __launch_bounds__(256) void layernorm_bwd_finish_f16(ze_f16* dw, ze_f16* db, const double* pw, const double* pb, i64 n, i64 chunks) {
    ze_layernorm_bwd_finish(dw, db, pw, pb, n, chunks);
}

// ---------------------------------------------------------------------------
// CrossEntropy.
//
// cross_entropy_check validates the targets before anything is written, as
// the CPU's checkTargets: flags[0] counts the rows whose target is not the
// ignore index, and flags[1] records the first row r (lowest index) whose
// target is out of [0, classes) and not ignored, as ~r (the maximum of ~r
// over the bad rows), so that 0 means "none" and the host clears both
// flags with one fill. The loss kernels do nothing when flags[1] != 0, so
// that an error leaves their outputs untouched.

extern "C" __global__ __launch_bounds__(256) void cross_entropy_check(const i64* target, i64 ts, i64 rows, i64 classes, i64 ignore, u64* flags) {
    u64 count = 0, bad = 0;
    ZE_GRID_LOOP(r, rows) {
        const i64 t = target[r * ts];
        if (t == ignore) continue;
        if (t < 0 || t >= classes) {
            if (~(u64)r > bad) bad = ~(u64)r;
        } else {
            ++count;
        }
    }
    count = ze_warp_reduce(count, ZeSum());
    bad = ze_warp_reduce(bad, ZeMaxInt());
    if ((threadIdx.x & 31) == 0) {
        if (count != 0) atomicAdd(&flags[0], count);
        if (bad != 0) atomicMax(&flags[1], bad);
    }
}

// Per row with target t (vmath for float, the float64 loop for double):
//
//	lp   = (x − m) − log Σ exp(x − m)          (log-softmax, rounded)
//	loss = −lp[t]                                (double)
//	with label smoothing ε:
//	loss = (1−ε)·loss + ε/C·(−Σ lp)             (float: Σ lp rounded to float)
//
// rounded once to the type; ignored rows get 0.
__device__ __forceinline__ double ze_round_sum(float, double s) { return (double)(float)s; }
__device__ __forceinline__ double ze_round_sum(double, double s) { return s; }

template <class T>
__device__ __forceinline__ void ze_cross_entropy(T* loss, i64 ls, const T* logits, const i64* target, i64 ts, i64 rows,
                                                 i64 classes, i64 ignore, double eps, const u64* flags, int group) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    if (flags[1] != 0) return;
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        const i64 t = target[row * ts];
        if (t == ignore) {
            if (lane == 0) loss[row * ls] = Ty::store((C)0);
            continue;
        }
        const T* x = logits + row * classes;
        C m;
        double s;
        ze_row_max_sum<T>(x, classes, lane, group, smax, ssum, m, s);
        const C lsum = ze_log_sum(m, s);
        double smooth = 0.0;
        if (eps != 0.0) {
            double acc = 0.0;
            for (i64 j = lane; j < classes; j += group) acc += (double)ze_sub(ze_sub(Ty::load(x[j]), m), lsum);
            smooth = -ze_round_sum(m, ze_group_reduce(acc, group, ssum, ZeSum()));
        }
        if (lane == 0) {
            double l = -(double)ze_sub(ze_sub(Ty::load(x[t]), m), lsum);
            if (eps != 0.0) l = (1.0 - eps) * l + eps / (double)classes * smooth;
            loss[row * ls] = ZeAcc<T>::out(l);
        }
    }
}

// Backward: dlogits = dloss·(softmax(x) − (1−ε)·[c = t] − ε/C), with the
// CPU's steps. float: p = softmax (flushed), d = p·g, d += (float)(−g·ε/C)
// when ε ≠ 0, d[t] −= (float)(g·(1−ε)), flushed again. double: d = p·g −
// g·ε/C, d[t] −= g·(1−ε). dloss is strided (gs may be 0: one value for
// every row). Ignored rows get 0.
__device__ __forceinline__ float ze_ce_grad(float p, float g, double eps, i64 classes, bool is_t) {
    float d = ze_mul(p, g);
    if (eps != 0.0) d = ze_add(d, (float)(-(double)g * eps / (double)classes));
    if (is_t) d = ze_sub(d, (float)((double)g * (1.0 - eps)));
    return ze_flush(d);
}
__device__ __forceinline__ double ze_ce_grad(double p, double g, double eps, i64 classes, bool is_t) {
    double d = ze_sub(ze_mul(p, g), g * eps / (double)classes);
    if (is_t) d = ze_sub(d, ze_mul(g, 1.0 - eps));
    return d;
}

template <class T>
__device__ __forceinline__ void ze_cross_entropy_bwd(T* dlogits, const T* dloss, i64 gs, const T* logits, const i64* target,
                                                     i64 ts, i64 rows, i64 classes, i64 ignore, double eps, const u64* flags,
                                                     int group) {
    typedef ZeType<T> Ty;
    typedef typename Ty::C C;
    __shared__ C smax[32];
    __shared__ double ssum[32];
    if (flags[1] != 0) return;
    const int lane = threadIdx.x % group;
    ZE_ROW_LOOP(row, rows, group) {
        const i64 t = target[row * ts];
        T* dx = dlogits + row * classes;
        if (t == ignore) {
            for (i64 j = lane; j < classes; j += group) dx[j] = Ty::store((C)0);
            continue;
        }
        const T* x = logits + row * classes;
        C m;
        double s;
        ze_row_max_sum<T>(x, classes, lane, group, smax, ssum, m, s);
        const C inv = ze_div((C)1, (C)s);
        const C g = Ty::load(dloss[row * gs]);
        for (i64 j = lane; j < classes; j += group) {
            const C p = ze_softmax_flush(ze_mul(ze_exp_c(ze_sub(Ty::load(x[j]), m)), inv));
            dx[j] = Ty::store(ze_ce_grad(p, g, eps, classes, j == t));
        }
    }
}

extern "C" __global__ __launch_bounds__(1024) void cross_entropy_f32(float* loss, i64 ls, const float* logits, const i64* target, i64 ts, i64 rows,
                                          i64 classes, i64 ignore, double eps, const u64* flags, int group) {
    ze_cross_entropy(loss, ls, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_f64(double* loss, i64 ls, const double* logits, const i64* target, i64 ts, i64 rows,
                                          i64 classes, i64 ignore, double eps, const u64* flags, int group) {
    ze_cross_entropy(loss, ls, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_bf16(ze_bf16* loss, i64 ls, const ze_bf16* logits, const i64* target, i64 ts, i64 rows,
                                          i64 classes, i64 ignore, double eps, const u64* flags, int group) {
    ze_cross_entropy(loss, ls, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_f16(ze_f16* loss, i64 ls, const ze_f16* logits, const i64* target, i64 ts, i64 rows,
                                          i64 classes, i64 ignore, double eps, const u64* flags, int group) {
    ze_cross_entropy(loss, ls, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_bwd_f32(float* dlogits, const float* dloss, i64 gs, const float* logits,
                                              const i64* target, i64 ts, i64 rows, i64 classes, i64 ignore, double eps,
                                              const u64* flags, int group) {
    ze_cross_entropy_bwd(dlogits, dloss, gs, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_bwd_f64(double* dlogits, const double* dloss, i64 gs, const double* logits,
                                              const i64* target, i64 ts, i64 rows, i64 classes, i64 ignore, double eps,
                                              const u64* flags, int group) {
    ze_cross_entropy_bwd(dlogits, dloss, gs, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_bwd_bf16(ze_bf16* dlogits, const ze_bf16* dloss, i64 gs, const ze_bf16* logits,
                                              const i64* target, i64 ts, i64 rows, i64 classes, i64 ignore, double eps,
                                              const u64* flags, int group) {
    ze_cross_entropy_bwd(dlogits, dloss, gs, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
extern "C" __global__ __launch_bounds__(1024) void cross_entropy_bwd_f16(ze_f16* dlogits, const ze_f16* dloss, i64 gs, const ze_f16* logits,
                                              const i64* target, i64 ts, i64 rows, i64 classes, i64 ignore, double eps,
                                              const u64* flags, int group) {
    ze_cross_entropy_bwd(dlogits, dloss, gs, logits, target, ts, rows, classes, ignore, eps, flags, group);
}
